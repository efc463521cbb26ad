//! End-to-end tests of `attempt-funnel generate` (#6) with the real binary: the same seed
//! gives the same bytes, the lines are the native format interleaved by time, and — what
//! the generator is for — `analyze` gives every generated operation the class it was
//! generated as (`--expected`).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::Config;

use common::*;

/// Every shape, over-budget included, in shares large enough to appear in a few thousand
/// operations.
const ALL_SHAPES: &str =
    "healthy=40,nested-retry=10,fan-out=10,redelivery=10,overlap=10,burst=10,over-budget=10";

/// The keys of every line, in the order `generate` writes them.
const KEYS: [&str; 9] = [
    "operation_id",
    "test_run_id",
    "hop",
    "attempt",
    "start_ms",
    "finish_ms",
    "outcome",
    "target",
    "message_id",
];

/// What one `generate` run wrote.
struct Generated {
    events: Vec<u8>,
    /// `operation_id` → class, in file order.
    expected: Vec<(String, String)>,
    stderr: String,
    /// The events file, kept for `analyze`.
    file: TempFile,
}

impl Generated {
    fn lines(&self) -> Vec<&str> {
        std::str::from_utf8(&self.events)
            .expect("UTF-8")
            .lines()
            .collect()
    }

    fn expected_map(&self) -> BTreeMap<String, String> {
        self.expected.iter().cloned().collect()
    }
}

/// Runs `generate --ops OPS --seed SEED [--mix MIX]` into temp files.
fn generate(ops: u64, seed: u64, mix: Option<&str>) -> Generated {
    let file = TempFile::reserve("generated.jsonl");
    let expected = TempFile::reserve("expected.csv");
    let (ops, seed) = (ops.to_string(), seed.to_string());
    let mut args = vec!["generate", "--ops", &ops, "--seed", &seed];
    if let Some(mix) = mix {
        args.extend(["--mix", mix]);
    }
    let out = file.path().to_str().expect("UTF-8 temp path");
    let exp = expected.path().to_str().expect("UTF-8 temp path");
    args.extend(["--output", out, "--expected", exp]);
    let run = run(&args);
    run.expect_code(0);
    assert!(run.stdout.is_empty(), "events went to --output, not stdout");
    let text = std::fs::read_to_string(expected.path()).expect("expected file");
    let mut rows = text.lines();
    assert_eq!(rows.next(), Some("operation_id,class"), "header");
    let expected = rows
        .map(|r| {
            let (op, class) = r.split_once(',').expect("two columns");
            (op.to_string(), class.to_string())
        })
        .collect();
    Generated {
        events: std::fs::read(file.path()).expect("events file"),
        expected,
        stderr: run.stderr,
        file,
    }
}

/// Classes that `analyze` gives, by operation ID (all in one test run).
fn analysed_classes(g: &Generated) -> BTreeMap<String, String> {
    analyze_rows(&[g.file.path()], &[])
        .into_iter()
        .map(|r| (r.operation_id, r.class))
        .collect()
}

/// Panics with a tally of the disagreements (expected → got) and an example of each.
fn assert_classes_as_expected(g: &Generated, what: &str) {
    let expected = g.expected_map();
    let got = analysed_classes(g);
    assert_eq!(got.len(), expected.len(), "{what}: operations analysed");
    let mut wrong: BTreeMap<(String, String), (usize, String)> = BTreeMap::new();
    for (op, class) in &expected {
        let got = got.get(op).cloned().unwrap_or_else(|| "(missing)".into());
        if &got != class {
            let entry = wrong.entry((class.clone(), got)).or_insert((0, op.clone()));
            entry.0 += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{what}: classes differ from --expected (expected, got) → (count, example): {wrong:?}"
    );
}

fn class_counts(g: &Generated) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, class) in &g.expected {
        *counts.entry(class.clone()).or_default() += 1;
    }
    counts
}

#[test]
fn the_same_seed_gives_identical_bytes() {
    let a = generate(2000, 42, Some(ALL_SHAPES));
    let b = generate(2000, 42, Some(ALL_SHAPES));
    assert!(a.events == b.events, "events differ between two runs");
    assert_eq!(a.expected, b.expected);
    // Standard output carries the same bytes as --output.
    let stdout = run(&[
        "generate", "--ops", "2000", "--seed", "42", "--mix", ALL_SHAPES,
    ]);
    stdout.expect_code(0);
    assert!(stdout.stdout == a.events, "stdout differs from --output");
}

#[test]
fn a_different_seed_gives_different_events() {
    let a = generate(500, 1, None);
    let b = generate(500, 2, None);
    assert_ne!(a.events, b.events);
    assert!(b.lines()[0].contains("\"test_run_id\":\"run-2\""));
}

#[test]
fn lines_are_native_json_lines_with_keys_in_the_reference_order() {
    let g = generate(1000, 3, Some(ALL_SHAPES));
    for line in g.lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let object = value.as_object().expect("one object per line");
        assert_eq!(object.len(), KEYS.len(), "{line}");
        let positions: Vec<usize> = KEYS
            .iter()
            .map(|k| {
                line.find(&format!("\"{k}\":"))
                    .unwrap_or_else(|| panic!("no {k}: {line}"))
            })
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "key order: {line}"
        );
        assert!(value["attempt"].as_u64().is_some_and(|a| a >= 1), "{line}");
        let (start, finish) = (&value["start_ms"], &value["finish_ms"]);
        assert!(start.as_u64().expect("integer ms") <= finish.as_u64().expect("integer ms"));
        let op = value["operation_id"].as_str().expect("string");
        let msg = value["message_id"].as_str().expect("string");
        assert_eq!(op.strip_prefix("op-"), msg.strip_prefix("msg-"), "{line}");
        assert!(["ok", "error", "timeout", "503", "429"]
            .contains(&value["outcome"].as_str().expect("string outcome")));
    }
}

#[test]
fn every_operation_is_generated_once_and_lines_are_interleaved_by_time() {
    let ops = 3000;
    let g = generate(ops, 5, Some(ALL_SHAPES));
    assert_eq!(
        g.expected.len() as u64,
        ops,
        "one expected row per operation"
    );
    let expected_ids: BTreeSet<&str> = g.expected.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(expected_ids.len() as u64, ops, "operation IDs are unique");

    let lines = g.lines();
    let mut starts = Vec::with_capacity(lines.len());
    let mut ids_in_order: Vec<String> = Vec::with_capacity(lines.len());
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
        starts.push(v["start_ms"].as_u64().expect("start_ms"));
        ids_in_order.push(v["operation_id"].as_str().expect("id").to_string());
    }
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "sorted by start_ms"
    );
    let ids: BTreeSet<&str> = ids_in_order.iter().map(String::as_str).collect();
    assert_eq!(
        ids, expected_ids,
        "the events hold exactly the expected operations"
    );
    // Interleaved: far more switches between operations than operations.
    let switches = ids_in_order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches > 2 * ops as usize, "{switches} switches");

    // The analyzer reads every line as one attempt, and the summary line agrees.
    let rows = analyze_rows(&[g.file.path()], &[]);
    assert_eq!(rows.len() as u64, ops);
    let attempts: u64 = rows.iter().map(|r| r.total_attempts).sum();
    assert_eq!(attempts, lines.len() as u64);
    assert!(
        g.stderr.contains(&format!(
            "generated {ops} operations, {} attempt lines",
            lines.len()
        )),
        "{}",
        g.stderr
    );
}

#[test]
fn every_generated_shape_classifies_as_expected_over_several_seeds() {
    for seed in [1, 2, 3, 4] {
        let g = generate(3000, seed, Some(ALL_SHAPES));
        let counts = class_counts(&g);
        for class in CLASSES {
            assert!(
                counts.get(class).copied().unwrap_or(0) > 0,
                "seed {seed}: no {class} operation generated: {counts:?}"
            );
        }
        assert_classes_as_expected(&g, &format!("seed {seed}"));
    }
}

#[test]
fn the_default_mix_classifies_as_expected() {
    let g = generate(4000, 11, None);
    let counts = class_counts(&g);
    assert!(counts["healthy"] > 2000, "{counts:?}");
    assert!(!counts.contains_key("over-budget"), "{counts:?}");
    assert_classes_as_expected(&g, "default mix");
}

#[test]
fn crowded_mixes_still_classify_as_expected() {
    // Nested retries crowd the caller hop that bursts use; over-budget retries crowd the
    // dependency hop. Both must still come out as generated.
    for (seed, mix) in [
        (21, "nested-retry=60,burst=40"),
        (22, "over-budget=80,burst=20"),
        (23, "burst=1"),
    ] {
        let g = generate(2500, seed, Some(mix));
        assert_classes_as_expected(&g, mix);
    }
}

#[test]
fn generated_events_can_be_piped_into_analyze() {
    let gen = run(&["generate", "--ops", "300", "--seed", "8"]);
    gen.expect_code(0);
    let analysed = run_with_stdin(&["analyze", "--format", "jsonl"], Some(&gen.stdout));
    analysed.expect_code(0);
    assert_eq!(decode_rows(&analysed.stdout).len(), 300);
}

#[test]
fn fails_with_an_unknown_shape_in_the_mix() {
    let run = run(&[
        "generate",
        "--ops",
        "10",
        "--mix",
        "healthy=1,retry-storm=2",
    ]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("unknown shape \"retry-storm\"") && run.stderr.contains("over-budget"),
        "{}",
        run.stderr
    );
}

fn config() -> Config {
    Config {
        // Each case runs the binary twice on a few thousand lines.
        cases: 12,
        max_shrink_iters: 4,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Whatever the seed, size and mix, what `generate` writes classifies as it intends.
    #[test]
    fn what_generate_writes_classifies_as_it_intends(
        seed in any::<u64>(),
        ops in 200u64..2500,
        weights in proptest::collection::vec(0u32..10, 7),
    ) {
        let shapes = [
            "healthy", "nested-retry", "fan-out", "redelivery", "overlap", "burst", "over-budget",
        ];
        let mut mix: Vec<String> = shapes
            .iter()
            .zip(&weights)
            .map(|(s, w)| format!("{s}={w}"))
            .collect();
        if weights.iter().all(|&w| w == 0) {
            mix.push("healthy=1".into());
        }
        let mix = mix.join(",");
        let g = generate(ops, seed, Some(&mix));
        prop_assert_eq!(g.expected.len() as u64, ops);
        assert_classes_as_expected(&g, &format!("seed {seed}, ops {ops}, mix {mix}"));
    }
}

//! Property tests: the order of the input lines, and how they are spread over files, changes
//! no classification and no number of the summary (docs/rules.md defines every rule over the set
//! of events, not their order).
//!
//! Each case runs the real binary, so the case count is kept small: [`CASES`] a property,
//! [`DEEP_CASES`] with `ATTEMPT_FUNNEL_DEEP_TESTS=1`. Every case is analysed twice, in
//! memory and spilled: under a memory limit of half the input's bytes the events are
//! spilled in partitions, the first input read from standard input so that the spill starts
//! from a known number of partitions, and partitions too large for the limit are split
//! again when read back — which each spilled run's profile is checked to show. The
//! baselines are in memory.

mod common;

use std::ffi::OsString;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::Config;

use common::*;

/// Cases per property. Each case runs the binary four times (two formats, in memory and
/// spilled), and a spilled run of the incident costs about ten in memory.
const CASES: u32 = 8;

/// Cases per property with `ATTEMPT_FUNNEL_DEEP_TESTS=1`.
const DEEP_CASES: u32 = 96;

fn config() -> Config {
    Config {
        cases: if deep_tests() { DEEP_CASES } else { CASES },
        // Each shrink step runs the binary, and shrinking a seed buys little.
        max_shrink_iters: 8,
        failure_persistence: None,
        ..Config::default()
    }
}

/// The output of one analysis in the two forms compared: the per-operation rows as sorted
/// JSON lines, and the summary without `input.files` (which names the inputs).
#[derive(Debug, PartialEq)]
struct Outcome {
    rows: Vec<String>,
    summary: serde_json::Value,
}

/// How a run holds its events: all in memory, or spilled past a memory limit of half the
/// input, the first input read from standard input.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    InMemory,
    /// `splits_again`: the input has enough operations that some of the first spill's
    /// [`FIRST_PARTITIONS_FROM_STDIN`] partitions outgrow the limit and are split again
    /// (with fewer operations than that, a partition too large holds one operation, which
    /// is read whole).
    Spilled {
        splits_again: bool,
    },
}

/// Both modes, for an input with enough operations to split partitions again or not.
fn every_mode(splits_again: bool) -> [Mode; 2] {
    [Mode::InMemory, Mode::Spilled { splits_again }]
}

fn outcome(files: &[&std::path::Path]) -> Outcome {
    outcome_in(files, Mode::InMemory)
}

fn outcome_in(files: &[&std::path::Path], mode: Mode) -> Outcome {
    let mut stdin = None;
    let mut args: Vec<OsString> = Vec::new();
    let mut env = Vec::new();
    if let Mode::Spilled { .. } = mode {
        let bytes: u64 = files
            .iter()
            .map(|f| std::fs::metadata(f).expect("an input").len())
            .sum();
        args.extend([
            "--memory-limit".into(),
            (bytes / 2).max(1).to_string().into(),
        ]);
        stdin = Some(std::fs::read(files[0]).expect("the first input"));
        args.push("-".into());
        args.extend(files[1..].iter().map(|f| f.as_os_str().to_owned()));
        env.push(("ATTEMPT_FUNNEL_PROFILE", "1"));
    } else {
        args.extend(files.iter().map(|f| f.as_os_str().to_owned()));
    }
    let run = |format: &str| {
        let mut all: Vec<OsString> = vec!["analyze".into(), "--format".into(), format.into()];
        all.extend(args.iter().cloned());
        let run = run_with_env(&all, stdin.as_deref(), &env);
        run.expect_code(0);
        if let Mode::Spilled { splits_again } = mode {
            assert!(
                profile_notes(&run.stderr, "spilled,") > 0,
                "not spilled: {}",
                run.stderr
            );
            let read_back = partitions_read_back(&run.stderr);
            assert!(
                !splits_again || read_back > FIRST_PARTITIONS_FROM_STDIN,
                "{read_back} partitions read back: none was split again"
            );
        }
        let said = without_profile(&run.stderr);
        assert!(said.is_empty(), "{said}");
        run
    };
    let jsonl = run("jsonl");
    let mut rows: Vec<String> = jsonl.stdout_text().lines().map(String::from).collect();
    rows.sort();
    // The rows must also decode into the documented schema.
    decode_rows(&jsonl.stdout);

    let json = run("json");
    let mut summary = decode_summary_value(&json.stdout);
    let files_field = summary["input"]
        .as_object_mut()
        .expect("input is an object")
        .remove("files");
    assert_eq!(
        files_field.and_then(|f| f.as_array().map(Vec::len)),
        Some(files.len()),
        "input.files lists every input"
    );
    Outcome { rows, summary }
}

fn incident_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(|| fixture_lines("incident.jsonl"))
}

fn incident_baseline() -> &'static Outcome {
    static BASE: OnceLock<Outcome> = OnceLock::new();
    BASE.get_or_init(|| outcome(&[&fixture("incident.jsonl")]))
}

/// Every class fixture, concatenated: all whole attempt records, with distinct operation IDs.
fn class_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(|| {
        class_fixtures()
            .iter()
            .flat_map(|f| {
                let text = std::fs::read_to_string(f).expect("read class fixture");
                text.lines().map(|l| format!("{l}\n")).collect::<Vec<_>>()
            })
            .collect()
    })
}

fn class_baseline() -> &'static Outcome {
    static BASE: OnceLock<Outcome> = OnceLock::new();
    BASE.get_or_init(|| {
        let all = TempFile::new("classes-all.jsonl", class_lines().concat().as_bytes());
        outcome(&[all.path()])
    })
}

/// Point events without attempt numbers, which pair by their order in time: the lines whose
/// order matters most to get right, and mixed records and point events.
fn point_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(|| {
        ["point-events-unnumbered.jsonl", "mixed-forms.jsonl"]
            .iter()
            .flat_map(|name| fixture_lines(name))
            .collect()
    })
}

fn point_baseline() -> &'static Outcome {
    static BASE: OnceLock<Outcome> = OnceLock::new();
    BASE.get_or_init(|| outcome_of_shuffled("points-all.jsonl", point_lines(), Mode::InMemory))
}

/// Analyses `lines` written in this order to one file.
fn outcome_of_shuffled(name: &str, lines: &[String], mode: Mode) -> Outcome {
    let file = TempFile::new(name, lines.concat().as_bytes());
    outcome_in(&[file.path()], mode)
}

/// Analyses `lines` spread over `parts` files: line `i` goes to file `assignment[i]`.
fn outcome_of_split(
    name: &str,
    lines: &[String],
    parts: usize,
    assignment: &[usize],
    mode: Mode,
) -> Outcome {
    let mut contents = vec![String::new(); parts];
    for (line, &part) in lines.iter().zip(assignment) {
        contents[part].push_str(line);
    }
    let files: Vec<TempFile> = contents
        .iter()
        .enumerate()
        .map(|(i, c)| TempFile::new(&format!("{name}-part{i}.jsonl"), c.as_bytes()))
        .collect();
    let paths: Vec<&std::path::Path> = files.iter().map(TempFile::path).collect();
    outcome_in(&paths, mode)
}

/// A small deterministic generator (splitmix64). Cases are drawn as seeds, so that a failing
/// case prints as one number rather than thousands of lines.
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

/// `lines` in the order a Fisher–Yates shuffle with `seed` gives.
fn shuffled(lines: &[String], seed: u64) -> Vec<String> {
    let mut rng = Seeded(seed);
    let mut out = lines.to_vec();
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i + 1));
    }
    out
}

/// Which of `parts` files each of `n` lines goes to.
fn partition(n: usize, parts: usize, seed: u64) -> Vec<usize> {
    let mut rng = Seeded(seed);
    (0..n).map(|_| rng.below(parts)).collect()
}

/// Paths (`a.b[2].c`) where two JSON values differ.
fn json_differences(
    got: &serde_json::Value,
    want: &serde_json::Value,
    path: &str,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for key in g.keys().chain(w.keys().filter(|k| !g.contains_key(*k))) {
                let (gv, wv) = (
                    g.get(key).unwrap_or(&Value::Null),
                    w.get(key).unwrap_or(&Value::Null),
                );
                json_differences(gv, wv, &format!("{path}.{key}"), out);
            }
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                json_differences(gv, wv, &format!("{path}[{i}]"), out);
            }
        }
        _ if got != want => out.push(format!("{path}: got {got}, want {want}")),
        _ => {}
    }
}

fn assert_same(got: &Outcome, want: &Outcome) -> Result<(), TestCaseError> {
    if got.rows != want.rows {
        let missing: Vec<&String> = want
            .rows
            .iter()
            .filter(|r| !got.rows.contains(r))
            .take(5)
            .collect();
        let extra: Vec<&String> = got
            .rows
            .iter()
            .filter(|r| !want.rows.contains(r))
            .take(5)
            .collect();
        return Err(TestCaseError::fail(format!(
            "per-operation rows differ ({} vs {} rows)\nexpected but missing: {missing:#?}\nunexpected: {extra:#?}",
            got.rows.len(),
            want.rows.len()
        )));
    }
    let mut differences = Vec::new();
    json_differences(&got.summary, &want.summary, "summary", &mut differences);
    prop_assert!(
        differences.is_empty(),
        "summaries differ:\n{}",
        differences
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

/// The incident and the class fixtures have enough operations to split partitions again;
/// the point events (seven operations) do not.
const INCIDENT_SPLITS: bool = true;
const CLASSES_SPLIT: bool = true;
const POINTS_SPLIT: bool = false;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn shuffling_the_incident_lines_changes_no_output(seed in any::<u64>()) {
        let lines = shuffled(incident_lines(), seed);
        for mode in every_mode(INCIDENT_SPLITS) {
            let got = outcome_of_shuffled("incident-shuffled.jsonl", &lines, mode);
            assert_same(&got, incident_baseline())?;
        }
    }

    #[test]
    fn splitting_the_incident_into_several_files_changes_no_output(
        parts in 2usize..=4,
        seed in any::<u64>(),
    ) {
        let assignment = partition(incident_lines().len(), parts, seed);
        for mode in every_mode(INCIDENT_SPLITS) {
            let got = outcome_of_split("incident-split", incident_lines(), parts, &assignment, mode);
            assert_same(&got, incident_baseline())?;
        }
    }

    #[test]
    fn shuffling_or_splitting_unnumbered_point_events_changes_no_output(
        parts in 1usize..=3,
        seed in any::<u64>(),
    ) {
        let lines = shuffled(point_lines(), seed);
        let assignment = partition(lines.len(), parts, seed ^ 0x5555_5555_5555_5555);
        for mode in every_mode(POINTS_SPLIT) {
            let got = outcome_of_split("points-split", &lines, parts, &assignment, mode);
            assert_same(&got, point_baseline())?;
        }
    }

    #[test]
    fn shuffling_the_class_fixtures_changes_no_output(seed in any::<u64>()) {
        let lines = shuffled(class_lines(), seed);
        for mode in every_mode(CLASSES_SPLIT) {
            let got = outcome_of_shuffled("classes-shuffled.jsonl", &lines, mode);
            assert_same(&got, class_baseline())?;
        }
    }

    #[test]
    fn splitting_shuffled_class_fixtures_into_several_files_changes_no_output(
        parts in 2usize..=4,
        seed in any::<u64>(),
    ) {
        let lines = shuffled(class_lines(), seed);
        let assignment = partition(lines.len(), parts, seed ^ 0x5555_5555_5555_5555);
        for mode in every_mode(CLASSES_SPLIT) {
            let got = outcome_of_split("classes-split", &lines, parts, &assignment, mode);
            assert_same(&got, class_baseline())?;
        }
    }
}

#[test]
fn the_concatenated_class_fixtures_keep_every_class_of_their_file() {
    // The property baselines above are only meaningful if concatenation itself changes
    // nothing: each operation keeps the class its own fixture file gives it.
    let rows = decode_rows(
        class_baseline()
            .rows
            .iter()
            .map(|r| format!("{r}\n"))
            .collect::<String>()
            .as_bytes(),
    );
    let mut expected = std::collections::BTreeMap::new();
    for file in class_fixtures() {
        for row in analyze_rows(&[&file], &[]) {
            expected.insert(row.id(), row);
        }
    }
    assert_eq!(by_id(rows), expected);
}

#[test]
fn the_shuffle_is_a_permutation_and_the_partition_uses_every_file() {
    let lines = incident_lines();
    let a = shuffled(lines, 1);
    assert_ne!(a, lines, "the shuffle moved nothing");
    assert_ne!(a, shuffled(lines, 2), "seeds make different orders");
    let (mut sorted_a, mut sorted_lines) = (a.clone(), lines.to_vec());
    sorted_a.sort();
    sorted_lines.sort();
    assert_eq!(sorted_a, sorted_lines);
    for parts in 2..=4 {
        let assignment = partition(lines.len(), parts, 7);
        for part in 0..parts {
            assert!(assignment.contains(&part), "file {part} of {parts} empty");
        }
    }
}

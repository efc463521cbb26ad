//! A small mutation fuzzer that runs on stable Rust, driving the fuzz targets kept beside
//! the code they test (the `fuzz_*` tests: JSON Lines fast path against serde, logfmt,
//! OTLP, Zipkin, whole inputs, the gate grammar, the policy file, the Parquet reader).
//!
//! Every test run replays each target's committed corpus (`fuzz/corpus/<target>/`), so an
//! input once found to fail stays a regression test. With `FUZZ_SECONDS=N` a target keeps
//! mutating its corpus for N seconds (`fuzz/run.sh` runs them all); an input that fails is
//! written to `fuzz/crashes/<target>/` and fails the test, with the seed that reproduces
//! the run (`FUZZ_SEED`).
//!
//! The mutations are the usual ones (flip, set, insert, delete, duplicate, splice) plus
//! tokens that matter to our parsers: quotes, escapes, brackets, `-0`, huge exponents,
//! control characters, a byte-order mark, the Parquet magic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest input a mutation makes: enough for any parser state, small enough to run
/// thousands of inputs a second.
const MAX_INPUT: usize = 1 << 16;

/// Tokens inserted by mutation.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"=",
    b" ",
    b"\n",
    b"\r\n",
    b"\t",
    b"-0",
    b"-0.0",
    b"0",
    b"1e400",
    b"1e39",
    b"-1",
    b"18446744073709551616",
    b"1.5e308",
    b"\\u0000",
    b"\\u001b",
    b"\\ud800",
    b"\\\"",
    b"null",
    b"true",
    b"false",
    b"\x00",
    b"\x1b[31m",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"PAR1",
    b"\"operation_id\":",
    b"\"start_ms\":",
    b"\"parentSpanId\":",
    b"\"spanId\":",
    b"\"traceId\":",
    b"%",
    b"@",
    b">",
    b"<=",
];

/// xorshift64*: deterministic from its seed, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

/// The committed inputs of `target`, sorted by file name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz target {target}: no corpus at {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("read corpus file"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "fuzz target {target}: empty corpus");
    files
}

fn mutate(rng: &mut Rng, seeds: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].1.clone();
    for _ in 0..1 + rng.below(8) {
        let len = data.len();
        match rng.below(8) {
            0 if len > 0 => {
                let at = rng.below(len);
                data[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                data[at] = rng.next() as u8;
            }
            2 => {
                let at = rng.below(len + 1);
                let token = TOKENS[rng.below(TOKENS.len())];
                data.splice(at..at, token.iter().copied());
            }
            3 if len > 0 => {
                let from = rng.below(len);
                let to = (from + 1 + rng.below(16)).min(len);
                data.drain(from..to);
            }
            4 if len > 0 => {
                let from = rng.below(len);
                let to = (from + 1 + rng.below(64)).min(len);
                let copy = data[from..to].to_vec();
                let at = rng.below(len + 1);
                data.splice(at..at, copy);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())].1;
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let to = (from + 1 + rng.below(256)).min(other.len());
                    let at = rng.below(len + 1);
                    data.splice(at..at, other[from..to].iter().copied());
                }
            }
            6 if len > 0 => {
                // Cut: a truncated write.
                data.truncate(rng.below(len));
            }
            _ => {
                let at = rng.below(len + 1);
                let digits = (rng.next() % 1_000_000_000).to_string();
                data.splice(at..at, digits.bytes());
            }
        }
    }
    data.truncate(MAX_INPUT);
    data
}

/// Runs `check` on `input`; a panic saves the input and fails the test.
fn one(target: &str, what: &str, input: &[u8], check: &dyn Fn(&[u8])) {
    if catch_unwind(AssertUnwindSafe(|| check(input))).is_err() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/crashes")
            .join(target);
        let _ = std::fs::create_dir_all(&dir);
        let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let path = dir.join(format!("{hash:016x}"));
        let _ = std::fs::write(&path, input);
        panic!(
            "fuzz target {target} failed on {what}; input saved to {} (add it to fuzz/corpus/{target}/ once fixed)",
            path.display()
        );
    }
}

/// Replays the corpus of `target` through `check`, then mutates it for `FUZZ_SECONDS`
/// (none when unset). `check` panics on a wrong result; any panic fails.
pub fn run(target: &str, check: impl Fn(&[u8])) {
    let seeds = corpus(target);
    for (name, input) in &seeds {
        one(target, &format!("corpus file {name}"), input, &check);
    }
    let seconds: u64 = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if seconds == 0 {
        return;
    }
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut runs: u64 = 0;
    while Instant::now() < deadline {
        for _ in 0..64 {
            let input = mutate(&mut rng, &seeds);
            one(
                target,
                &format!("a mutated input (FUZZ_SEED={seed}, run {runs})"),
                &input,
                &check,
            );
            runs += 1;
        }
    }
    eprintln!("fuzz {target}: {runs} inputs in {seconds} s, no failure (FUZZ_SEED={seed})");
}

//! The parse floor of the benchmark: reads a JSON Lines file on every core, 8 MiB at a
//! time, and parses each line's attempt fields with one general-purpose JSON parser, doing
//! nothing else with them. Any tool that reads these fields from JSON text spends at least
//! this long; bench/run.sh times it beside the peers and attempt-funnel.
//!
//!     parse-floor [sonic|simd|serde|lines] EVENTS
//!
//! `sonic` (sonic-rs, the default), `simd` (simd-json, its buffers reused), `serde`
//! (serde_json), or `lines` (only find the lines). Prints the number of lines parsed.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

/// The fields of an attempt that the peers and attempt-funnel read from each line.
#[derive(serde::Deserialize)]
struct Attempt<'a> {
    #[serde(borrow)]
    operation_id: Cow<'a, str>,
    #[serde(borrow, default)]
    test_run_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    hop: Cow<'a, str>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    start_ms: Option<i64>,
    #[serde(default)]
    finish_ms: Option<i64>,
    #[serde(borrow, default)]
    outcome: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    target: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message_id: Option<Cow<'a, str>>,
}

impl Attempt<'_> {
    /// Touches every field, so that no parser can skip one.
    fn weight(&self) -> u64 {
        let text = |s: &Option<Cow<str>>| s.as_ref().map_or(0, |s| s.len() as u64);
        self.operation_id.len() as u64
            + text(&self.test_run_id)
            + self.hop.len() as u64
            + u64::from(self.attempt.unwrap_or(0))
            + self.start_ms.unwrap_or(0) as u64 % 7
            + self.finish_ms.unwrap_or(0) as u64 % 7
            + text(&self.outcome)
            + text(&self.target)
            + text(&self.message_id)
    }
}

#[derive(Clone, Copy)]
enum Parser {
    Sonic,
    Simd,
    Serde,
    Lines,
}

/// Each thread takes the next 8 MiB of the file and parses the lines that start in it.
const CHUNK: u64 = 8 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (parser, path) = match args.as_slice() {
        [path] => (Parser::Sonic, path),
        [name, path] => match name.as_str() {
            "sonic" => (Parser::Sonic, path),
            "simd" => (Parser::Simd, path),
            "serde" => (Parser::Serde, path),
            "lines" => (Parser::Lines, path),
            _ => return usage(),
        },
        _ => return usage(),
    };
    match run(parser, path) {
        Ok(lines) => {
            println!("{lines}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("parse-floor: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: parse-floor [sonic|simd|serde|lines] EVENTS.jsonl");
    ExitCode::from(2)
}

/// Parses every line of `path` on every core; the number of non-blank lines.
fn run(parser: Parser, path: &str) -> Result<u64, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = AtomicU64::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| parse_chunks(&file, len, &next, parser)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a parsing thread panicked"))
            .sum()
    })
}

/// Takes chunks until the file is done; a line belongs to the chunk it starts in.
fn parse_chunks(file: &File, len: u64, next: &AtomicU64, parser: Parser) -> Result<u64, String> {
    let mut buf = Vec::new();
    let mut scratch = Vec::new();
    let mut buffers = simd_json::Buffers::new(1024);
    let mut lines = 0;
    loop {
        let start = next.fetch_add(CHUNK, Ordering::Relaxed);
        if start >= len {
            return Ok(lines);
        }
        let end = (start + CHUNK).min(len);
        // The chunk, and then enough past its end to finish the line that starts in it.
        buf.resize((end - start) as usize, 0);
        read_at(file, &mut buf, start)?;
        let mut extra = 4096u64;
        while end < len && memchr::memchr(b'\n', &buf[(end - start - 1) as usize..]).is_none() {
            let from = start + buf.len() as u64;
            let more = extra.min(len - from) as usize;
            let at = buf.len();
            buf.resize(at + more, 0);
            read_at(file, &mut buf[at..], from)?;
            extra *= 2;
        }
        // A chunk's first line began in the chunk before unless the byte before it ends one.
        let mut pos = if start == 0 {
            0
        } else {
            let mut before = [0u8];
            read_at(file, &mut before, start - 1)?;
            if before[0] == b'\n' {
                0
            } else {
                match memchr::memchr(b'\n', &buf) {
                    Some(i) => i + 1,
                    None => buf.len(),
                }
            }
        };
        let limit = (end - start) as usize;
        while pos < limit {
            let stop = memchr::memchr(b'\n', &buf[pos..]).map_or(buf.len(), |i| pos + i);
            let line = &buf[pos..stop];
            pos = stop + 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            lines += 1;
            let weight = match parser {
                Parser::Lines => line.len() as u64,
                Parser::Sonic => sonic_rs::from_slice::<Attempt>(line)
                    .map_err(|e| e.to_string())?
                    .weight(),
                Parser::Serde => serde_json::from_slice::<Attempt>(line)
                    .map_err(|e| e.to_string())?
                    .weight(),
                Parser::Simd => {
                    // simd-json parses in place: a copy of the line, its buffers reused.
                    scratch.clear();
                    scratch.extend_from_slice(line);
                    simd_json::serde::from_slice_with_buffers::<Attempt>(&mut scratch, &mut buffers)
                        .map_err(|e| e.to_string())?
                        .weight()
                }
            };
            std::hint::black_box(weight);
        }
    }
}

fn read_at(file: &File, buf: &mut [u8], offset: u64) -> Result<(), String> {
    file.read_exact_at(buf, offset).map_err(|e| e.to_string())
}

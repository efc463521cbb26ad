//! Parquet input: one attempt event per row, read with polars.
//!
//! Columns carry the JSON Lines key names (snake_case, or the camelCase spellings JSON
//! Lines accepts; see [`super::fields::FIELDS`]), or the names a key mapping gives (see
//! [`super::mapping`]; a nested path is the column of its dotted name); every column is
//! optional except `operation_id`, and other columns are ignored. A cell may be a string,
//! an integer, a float or a boolean, and a null cell is a missing key. Each row becomes the
//! same `RawFields` a JSON Lines line becomes and goes through the same
//! `RawFields::check`, so a row is accepted, rejected and reported (`path:row: message`,
//! rows counted from 1) exactly as the equivalent line would be:
//!
//! ```text
//! operation_id  test_run_id  hop      attempt  start_ms       finish_ms      outcome
//! "op-1"        "run-7"      gateway  2        1700000001250  1700000001290  "503"
//! ```
//!
//! Times are numbers (milliseconds) or strings (milliseconds, or RFC 3339 as in `start`,
//! `finish`, `ts` and `time`); Parquet timestamp columns are not read (cast them to epoch
//! milliseconds when writing the file).
//!
//! polars runs in a worker process of our own binary (the hidden `parquet-worker`
//! command, [`worker`]), which sends the rows back over a pipe ([`wire`]). polars trusts
//! the sizes a Parquet file states: a corrupt file can make it ask for 2^61 bytes, and
//! the failed allocation aborts the process, which no `catch_unwind` catches (it also
//! panics on others, and reads its thrift metadata with lists sized from the file). In the
//! worker an abort, a panic or a killed process ends only the worker; here it becomes the
//! input error that names the file (exit 2). The worker decodes the next rows while this
//! process checks the last ones, so the two overlap.

mod wire;
pub mod worker;

use std::io::{BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};

use super::fields::Scalar;
use super::mapping::{Column as Dest, KeyMapping, Row};
use super::progress::{ByteCounter, Progress};
use super::source::{Input, ParquetData};
use super::{File, Reader};
use crate::model::SourceRef;
use wire::Kind;

/// The hidden command that runs [`worker::main`].
pub const WORKER_COMMAND: &str = "parquet-worker";

/// The most of the worker's stderr kept for the error message: its first line says why it
/// stopped (`memory allocation of … bytes failed`); the rest is drained and dropped.
const STDERR_KEPT: usize = 4096;

/// Frames read ahead of the rows being checked: the worker keeps decoding meanwhile.
const FRAMES_AHEAD: usize = 2;

/// The message of every unreadable Parquet file, with `why` (polars' words, or how the
/// worker stopped).
pub fn corrupt(why: &str) -> String {
    format!(
        "not a readable Parquet file: it is corrupt or truncated ({}); write it again, or convert it to JSON Lines",
        why.lines().next().unwrap_or("").trim()
    )
}

/// Reads one Parquet input, the `file`th.
pub(super) fn read(
    data: ParquetData,
    input: &Input,
    file: u32,
    reader: &mut Reader,
    progress: &mut Progress,
) -> Result<()> {
    let worker = Worker::spawn(data, &column_names(&reader.config.mapping))?;
    let read = reading(input, file, progress).run(&worker.frames, progress, reader);
    worker.finish(read)
}

/// The key mapping in force: the one given, or our keys under their own spellings.
fn mapping_of(given: &Option<KeyMapping>) -> std::borrow::Cow<'_, KeyMapping> {
    match given {
        Some(mapping) => std::borrow::Cow::Borrowed(mapping),
        None => std::borrow::Cow::Owned(KeyMapping::default()),
    }
}

/// Every column name read, whichever the file holds: the columns named by our keys'
/// spellings, or as the key mapping says; each once.
fn column_names(mapping: &Option<KeyMapping>) -> Vec<String> {
    let mut names: Vec<String> = mapping_of(mapping)
        .columns()
        .into_iter()
        .map(|(column, _)| column)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn reading<'c>(input: &'c Input, file: u32, progress: &Progress) -> Reading<'c> {
    Reading {
        size: input.size,
        counter: progress.counter(),
        file: File {
            index: file,
            name: &input.name,
        },
    }
}

/// A frame as the reading thread hands it over.
type Frame = (Kind, Vec<u8>);

/// The worker process and the threads that feed it the file and read its frames.
struct Worker {
    child: Child,
    frames: Receiver<Frame>,
    threads: Vec<JoinHandle<()>>,
    stderr: JoinHandle<Vec<u8>>,
}

impl Worker {
    fn spawn(data: ParquetData, columns: &[String]) -> Result<Worker> {
        let mut command = Command::new(own_binary()?);
        command.arg(WORKER_COMMAND);
        for column in columns {
            command.arg("--column").arg(column);
        }
        let bytes = match data {
            // The worker reads the file itself, by seeking, from its stdin.
            ParquetData::File(file) => {
                command.stdin(Stdio::from(file));
                None
            }
            ParquetData::Memory(cursor) => {
                command.stdin(Stdio::piped());
                Some(cursor.into_inner())
            }
        };
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("could not start the Parquet reader process")?;
        let mut threads = Vec::new();
        if let (Some(bytes), Some(mut pipe)) = (bytes, child.stdin.take()) {
            // A worker that stops early closes the pipe: the write fails, and that is all.
            threads.push(std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            }));
        }
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, frames) = sync_channel(FRAMES_AHEAD);
        threads.push(std::thread::spawn(move || {
            let mut input = BufReader::with_capacity(1 << 16, stdout);
            loop {
                let mut payload = Vec::new();
                // A frame cut short means the worker stopped: the end of the frames, and
                // `finish` says why from its exit status.
                match wire::read_frame(&mut input, &mut payload) {
                    Ok(Some(kind)) if sender.send((kind, payload)).is_ok() => {}
                    _ => return,
                }
            }
        }));
        let mut stderr = child.stderr.take().expect("piped stderr");
        let stderr = std::thread::spawn(move || {
            let mut kept = Vec::new();
            let _ = (&mut stderr)
                .take(STDERR_KEPT as u64)
                .read_to_end(&mut kept);
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            kept
        });
        Ok(Worker {
            child,
            frames,
            threads,
            stderr,
        })
    }

    /// Ends the worker after `read`: waits for it, or stops it when the reading stopped
    /// early (a bad row under `--strict`, a file without `operation_id`). `Ok(false)`, the
    /// frames ending before the last, becomes the error that says how the worker stopped.
    fn finish(mut self, read: Result<bool>) -> Result<()> {
        if read.is_err() {
            let _ = self.child.kill();
        }
        // Unblocks the reading thread if it waits to hand over a frame.
        drop(self.frames);
        let status = self.child.wait().context("the Parquet reader process")?;
        for thread in self.threads {
            let _ = thread.join();
        }
        let stderr = self.stderr.join().unwrap_or_default();
        match read? {
            true => Ok(()),
            false => bail!(corrupt(&stopped(status, &stderr))),
        }
    }
}

/// Our own executable, to run as the worker.
fn own_binary() -> Result<std::path::PathBuf> {
    // On Linux the running image itself, even if its file was replaced since it started.
    let proc = std::path::Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && proc.exists() {
        return Ok(proc.to_path_buf());
    }
    std::env::current_exe().context("could not find our own executable to read Parquet with")
}

/// How the worker stopped, for a file it could not read to the end.
fn stopped(status: ExitStatus, stderr: &[u8]) -> String {
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    let how = match (signal, status.code()) {
        // SIGKILL: most often the kernel's out-of-memory killer.
        (Some(9), _) => {
            "the reader process was killed (signal 9), perhaps out of memory".to_string()
        }
        (Some(signal), _) => format!("the reader process stopped on signal {signal}"),
        (None, Some(code)) => format!("the reader process stopped with exit code {code}"),
        (None, None) => "the reader process stopped".to_string(),
    };
    let text = String::from_utf8_lossy(stderr);
    match text.lines().map(str::trim).find(|line| !line.is_empty()) {
        Some(line) => format!("{how}: {line}"),
        None => how,
    }
}

/// What the `H` frame said: the rows in the file, the cells in each row, and the key
/// each cell fills (by its index in the row; a column may fill several keys).
struct Header {
    rows: u64,
    width: usize,
    present: Vec<(usize, Dest)>,
}

struct Reading<'c> {
    size: Option<u64>,
    counter: ByteCounter,
    file: File<'c>,
}

impl Reading<'_> {
    /// Checks and keeps the rows of every frame; `Ok(false)` when the frames end before
    /// the last one.
    fn run(
        &self,
        frames: impl IntoIterator<Item = Frame>,
        progress: &mut Progress,
        out: &mut Reader,
    ) -> Result<bool> {
        let config = out.config;
        let mapping = mapping_of(&config.mapping);
        let mut header: Option<Header> = None;
        let mut done_rows: u64 = 0;
        let mut bytes_counted = 0;
        for (kind, payload) in frames {
            match kind {
                Kind::Header => {
                    let (rows, names) = wire::read_header(&payload)?;
                    // Each key's column, as the index of its cell in a row.
                    let present: Vec<(usize, Dest)> = mapping
                        .columns()
                        .into_iter()
                        .filter_map(|(column, dest)| {
                            let at = names.iter().position(|name| *name == column)?;
                            Some((at, dest))
                        })
                        .collect();
                    if !present
                        .iter()
                        .any(|&(_, dest)| mapping.key_of(dest) == "operation_id")
                    {
                        match mapping.source_of("operation_id") {
                            Some(source) => bail!("the Parquet file has no column for operation_id, which {source}: name the column there (a nested key is the column of that dotted name)"),
                            None => bail!("the Parquet file has no operation_id column: name its columns as the JSON Lines keys (operation_id, test_run_id, hop, attempt, start_ms, finish_ms, outcome, …; see docs/input.md), or map yours with --field operation_id=COLUMN"),
                        }
                    }
                    header = Some(Header {
                        rows,
                        width: names.len(),
                        present,
                    });
                }
                Kind::Rows => {
                    let header = header
                        .as_ref()
                        .context("the Parquet reader sent rows before the columns")?;
                    done_rows = self.rows(&payload, header, done_rows, out)?;
                    if let Some(size) = self.size {
                        // Bytes are not read in order; count the share of rows done instead.
                        let rows = header.rows;
                        let done = (size as u128 * u128::from(done_rows.min(rows))
                            / u128::from(rows.max(1))) as u64;
                        self.counter.add(done - bytes_counted);
                        bytes_counted = done;
                    }
                    progress.update(out.progress_counts());
                }
                Kind::Error => bail!("{}", String::from_utf8_lossy(&payload)),
                Kind::Done => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Validates and keeps the rows of one `R` frame; `before` rows were read before it.
    /// Returns the rows read so far.
    fn rows(&self, payload: &[u8], header: &Header, before: u64, out: &mut Reader) -> Result<u64> {
        let config = out.config;
        let mapping = config.mapping.as_ref();
        let mut cells = wire::Cursor::new(payload);
        let count = cells.u32()?;
        let mut row_cells: Vec<Option<Scalar>> = Vec::with_capacity(header.width);
        for i in 0..u64::from(count) {
            row_cells.clear();
            for _ in 0..header.width {
                row_cells.push(cells.cell()?);
            }
            let mut row = match mapping {
                Some(mapping) => mapping.row(),
                None => Row::plain(),
            };
            let mut duplicate = None;
            for &(at, dest) in &header.present {
                let Some(value) = row_cells[at].clone() else {
                    continue;
                };
                if let Err(message) = row.set(dest, value) {
                    duplicate.get_or_insert(message);
                }
            }
            let line = before + i + 1;
            out.out.lines_read += 1;
            let checked = match (duplicate, mapping) {
                // As JSON Lines says of two spellings of one key on a line.
                (Some(message), _) => Err(message),
                (None, Some(mapping)) => mapping.check(row, out.hops),
                (None, None) => row.fields.check(out.hops),
            };
            match checked {
                Ok(checked) => {
                    let source = SourceRef {
                        file: self.file.index,
                        line: u32::try_from(line).unwrap_or(u32::MAX),
                    };
                    out.push(source, checked);
                }
                Err(message) => out.bad_line(self.file, line, message)?,
            }
        }
        if !cells.is_empty() {
            bail!("a frame of the Parquet reader holds more cells than its rows");
        }
        out.after_batch()?;
        Ok(before + u64::from(count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::BadInputPolicy;
    use crate::ingest::spans::mapping::SpanMapping;
    use crate::ingest::{Ingested, InputConfig, InputFormat};
    use crate::rules::HopOrder;
    use polars::prelude::{
        df, Column, DataFrame, IntoColumn, IntoSeries, NamedFrom, ParquetWriter, Series,
    };
    use std::io::Cursor;

    fn config(bad_input: BadInputPolicy) -> InputConfig {
        InputConfig {
            paths: vec![],
            format: InputFormat::Auto,
            bad_input,
            progress: false,
            max_line_bytes: None,
            spans: SpanMapping::new(&HopOrder::default(), vec![false; 4]),
            mapping: None,
            presets: Vec::new(),
            partition: None,
            budget: None,
        }
    }

    fn parquet_bytes(mut frame: DataFrame) -> Vec<u8> {
        let mut out = Vec::new();
        ParquetWriter::new(&mut out).finish(&mut frame).unwrap();
        out
    }

    /// Reads `frame` as a Parquet file: the worker's side and this side joined by the
    /// frames in memory (tests/hostile.rs runs the worker as a process).
    fn ingest(frame: DataFrame, policy: BadInputPolicy) -> Result<Ingested> {
        let mut bytes = Cursor::new(parquet_bytes(frame));
        let mut stream = Vec::new();
        worker::stream(&mut bytes, &column_names(&None), &mut stream)?;
        let mut frames = Vec::new();
        let mut input = stream.as_slice();
        let mut payload = Vec::new();
        while let Some(kind) = wire::read_frame(&mut input, &mut payload)? {
            frames.push((kind, payload.clone()));
        }
        let (config, hops) = (config(policy), HopOrder::default());
        let mut reader = Reader::new(&config, &hops);
        let file = reader.add_file("mem.parquet");
        let input = Input::named("mem.parquet");
        let mut progress = Progress::hidden();
        let complete = reading(&input, file, &progress).run(frames, &mut progress, &mut reader)?;
        assert!(complete, "the frames end with D");
        reader.finish()
    }

    #[test]
    fn reads_rows_of_every_cell_type_and_ignores_unknown_columns() {
        let frame = df!(
            "operation_id" => ["op-1", "op-1"],
            "hop" => [Some("caller"), None],
            "attempt" => [1i32, 2],
            "start_ms" => [10.0f64, 20.0],
            "finish" => ["1970-01-01T00:00:00.015Z", "1970-01-01T00:00:00.025Z"],
            "outcome" => [Some(503i64), None],
            "effect" => [false, true],
            "colour" => ["red", "blue"],
        )
        .unwrap();
        let got = ingest(frame, BadInputPolicy::Report).unwrap();
        assert!(
            got.diagnostics.issues().is_empty(),
            "{:?}",
            got.diagnostics.issues()
        );
        assert_eq!(got.lines_read, 2);
        assert_eq!(got.events.len(), 2);
        assert_eq!(got.events[1].attempt(), Some(2));
        assert_eq!(got.events[1].source.line, 2);
        assert!(got.events[1].effect);
    }

    #[test]
    fn bad_rows_are_reported_by_row_number_with_the_json_lines_message() {
        let frame = df!(
            "operation_id" => [Some("op-1"), None, Some("op-3")],
            "start_ms" => [1i64, 2, -3],
        )
        .unwrap();
        let got = ingest(frame, BadInputPolicy::Report).unwrap();
        let issues: Vec<String> = got
            .diagnostics
            .issues()
            .iter()
            .map(|i| i.to_string())
            .collect();
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert!(
            issues[0].starts_with("mem.parquet:2: missing operation_id"),
            "{issues:?}"
        );
        assert!(
            issues[1].starts_with("mem.parquet:3: start_ms is negative"),
            "{issues:?}"
        );
    }

    #[test]
    fn strict_stops_at_the_first_bad_row() {
        let frame = df!("operation_id" => [Some("op-1"), None], "start_ms" => [1i64, 2]).unwrap();
        let err = ingest(frame, BadInputPolicy::Strict).unwrap_err();
        assert!(format!("{err:#}").contains("mem.parquet:2: missing operation_id"));
    }

    #[test]
    fn camel_case_columns_are_read_and_two_spellings_in_one_row_are_a_duplicate() {
        let frame = df!(
            "operationId" => [Some("op-1"), None, Some("op-3")],
            "operation_id" => [None, Some("op-2"), Some("op-3")],
            "startMs" => [1i64, 2, 3],
        )
        .unwrap();
        let got = ingest(frame, BadInputPolicy::Report).unwrap();
        assert_eq!(got.events.len(), 2);
        assert_eq!(got.diagnostics.issues().len(), 1);
        assert_eq!(got.diagnostics.issues()[0].line, 3);
        assert!(
            got.diagnostics.issues()[0]
                .message
                .starts_with("duplicate field `operation_id`"),
            "{}",
            got.diagnostics.issues()[0].message
        );
    }

    #[test]
    fn a_file_without_operation_id_is_refused_naming_the_columns_to_use() {
        let frame = df!("op_id" => ["op-1"], "start_ms" => [1i64]).unwrap();
        let err = format!("{:#}", ingest(frame, BadInputPolicy::Report).unwrap_err());
        assert!(err.contains("no operation_id column"), "{err}");
    }

    #[test]
    fn a_column_of_another_type_is_refused_naming_it() {
        let list = Series::new("start_ms".into(), [1i64, 2])
            .implode()
            .unwrap()
            .into_series();
        let frame = DataFrame::new_infer_height(vec![
            Column::new("operation_id".into(), ["op-1"]),
            list.into_column(),
        ])
        .unwrap();
        let err = format!("{:#}", ingest(frame, BadInputPolicy::Report).unwrap_err());
        assert!(err.contains("column start_ms has type list"), "{err}");
    }
}

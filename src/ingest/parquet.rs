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
//! The file is read [`ROWS_PER_SLICE`] rows at a time, so memory holds one slice of decoded
//! columns, not the whole file.

use std::borrow::Cow;

use anyhow::{bail, Context, Result};
use polars::io::mmap::MmapBytesReader;
use polars::prelude::{Column, DataFrame, DataType, ParquetReader, SerReader, Series};

use super::fields::Scalar;
use super::mapping::{Column as Dest, KeyMapping, Row};
use super::progress::{ByteCounter, Progress};
use super::source::{Input, ParquetData};
use super::{File, Reader};
use crate::model::SourceRef;

/// Rows decoded at a time: enough to amortise the per-slice overhead of polars, few enough
/// that a slice of decoded columns stays in the tens of megabytes.
const ROWS_PER_SLICE: usize = 1 << 18;

/// Reads one Parquet input, the `file`th.
pub(super) fn read(
    data: ParquetData,
    input: &Input,
    file: u32,
    reader: &mut Reader,
    progress: &mut Progress,
) -> Result<()> {
    let reading = Reading {
        size: input.size,
        counter: progress.counter(),
        file: File {
            index: file,
            name: &input.name,
        },
    };
    match data {
        ParquetData::File(mut f) => reading.run(&mut f, progress, reader),
        ParquetData::Memory(mut m) => reading.run(&mut m, progress, reader),
    }
}

struct Reading<'c> {
    size: Option<u64>,
    counter: ByteCounter,
    file: File<'c>,
}

impl Reading<'_> {
    fn run<R: MmapBytesReader>(
        &self,
        data: &mut R,
        progress: &mut Progress,
        out: &mut Reader,
    ) -> Result<()> {
        let mut reader = ParquetReader::new(&mut *data);
        let schema = reader.schema().context("not a readable Parquet file")?;
        // The columns named by our keys' spellings, or as the key mapping says.
        let plain = KeyMapping::default();
        let config = out.config;
        let mapping = config.mapping.as_ref().unwrap_or(&plain);
        let present: Vec<(String, Dest)> = mapping
            .columns()
            .into_iter()
            .filter(|(column, _)| schema.contains(column))
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
        let mut names: Vec<String> = present.iter().map(|(c, _)| c.clone()).collect();
        names.sort_unstable();
        names.dedup();
        let metadata = reader
            .get_metadata()
            .context("not a readable Parquet file")?
            .clone();
        let rows = metadata.num_rows;
        let mut bytes_counted = 0;
        let mut offset = 0;
        while offset < rows {
            let len = ROWS_PER_SLICE.min(rows - offset);
            let mut reader = ParquetReader::new(&mut *data)
                .with_columns(Some(names.clone()))
                .with_slice(Some((offset, len)));
            reader.set_metadata(metadata.clone());
            let frame = reader
                .finish()
                .context("could not decode the Parquet file")?;
            self.rows(&frame, &present, offset, out)?;
            offset += len;
            if let Some(size) = self.size {
                // Bytes are not read in order; count the share of rows done instead.
                let done = (size as u128 * offset as u128 / rows as u128) as u64;
                self.counter.add(done - bytes_counted);
                bytes_counted = done;
            }
            progress.update(out.out.events.len(), out.out.operations.len());
        }
        Ok(())
    }

    /// Validates and keeps the rows of one slice; `first` is the slice's 0-based offset.
    fn rows(
        &self,
        frame: &DataFrame,
        present: &[(String, Dest)],
        first: usize,
        out: &mut Reader,
    ) -> Result<()> {
        let columns: Vec<(Series, Dest)> = present
            .iter()
            .map(|(name, dest)| Ok((scalar_series(frame.column(name)?, name)?, *dest)))
            .collect::<Result<_>>()?;
        let mut cells = columns
            .iter()
            .map(|(series, dest)| Ok((scalars(series)?, *dest)))
            .collect::<Result<Vec<_>>>()?;
        let config = out.config;
        let mapping = config.mapping.as_ref();
        for i in 0..frame.height() {
            let mut row = match mapping {
                Some(mapping) => mapping.row(),
                None => Row::plain(),
            };
            let mut duplicate = None;
            for (column, dest) in &mut cells {
                let Some(value) = column.next().flatten() else {
                    continue;
                };
                if let Err(message) = row.set(*dest, value) {
                    duplicate.get_or_insert(message);
                }
            }
            let line = (first + i + 1) as u64;
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
        out.after_batch()
    }
}

/// The column as one of the four types a [`Scalar`] holds: String, Int64, Float64 or
/// Boolean.
fn scalar_series(column: &Column, name: &str) -> Result<Series> {
    let series = column.as_materialized_series();
    let dtype = series.dtype();
    let target = if dtype.is_string() || dtype.is_bool() {
        return Ok(series.clone());
    } else if dtype.is_integer() {
        DataType::Int64
    } else if dtype.is_float() {
        DataType::Float64
    } else if dtype.is_categorical() || dtype.is_enum() {
        DataType::String
    } else {
        bail!("column {name} has type {dtype}: Parquet columns must hold strings, integers, floats or booleans (times as epoch milliseconds)");
    };
    series
        .strict_cast(&target)
        .with_context(|| format!("column {name} ({dtype}) does not fit in {target}"))
}

type Cells<'s> = Box<dyn Iterator<Item = Option<Scalar<'s>>> + 's>;

/// The cells of a column from [`scalar_series`], in row order.
fn scalars(series: &Series) -> Result<Cells<'_>> {
    Ok(match series.dtype() {
        DataType::String => Box::new(
            series
                .str()?
                .iter()
                .map(|v| v.map(|s| Scalar::Str(Cow::Borrowed(s)))),
        ),
        DataType::Boolean => Box::new(series.bool()?.iter().map(|v| v.map(Scalar::Bool))),
        DataType::Int64 => Box::new(series.i64()?.iter().map(|v| v.map(Scalar::Int))),
        _ => Box::new(series.f64()?.iter().map(|v| v.map(Scalar::Float))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::BadInputPolicy;
    use crate::ingest::spans::mapping::SpanMapping;
    use crate::ingest::{Ingested, InputConfig, InputFormat};
    use crate::rules::HopOrder;
    use polars::prelude::{df, IntoColumn, IntoSeries, NamedFrom, ParquetWriter};
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
            partition: None,
            budget: None,
        }
    }

    fn parquet_bytes(mut frame: DataFrame) -> Vec<u8> {
        let mut out = Vec::new();
        ParquetWriter::new(&mut out).finish(&mut frame).unwrap();
        out
    }

    fn ingest(frame: DataFrame, policy: BadInputPolicy) -> Result<Ingested> {
        let bytes = parquet_bytes(frame);
        let (config, hops) = (config(policy), HopOrder::default());
        let mut reader = Reader::new(&config, &hops);
        let file = reader.add_file("mem.parquet");
        read(
            ParquetData::Memory(Cursor::new(bytes)),
            &Input::named("mem.parquet"),
            file,
            &mut reader,
            &mut Progress::hidden(),
        )?;
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

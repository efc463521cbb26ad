//! The Parquet worker: the process that runs polars on a Parquet file and sends its rows to
//! the parent as the [`wire`] stream on stdout (the hidden `parquet-worker` command; see
//! [`super`] for why it is a process of its own).
//!
//! The file is standard input: the file itself when the parent opened one on disk (read by
//! seeking), else the bytes the parent writes into the pipe (held in memory, as Parquet
//! must be read by seeking). Only the columns the parent asks for are decoded, and only
//! [`ROWS_PER_SLICE`] rows at a time, so memory holds one slice of decoded columns.

use std::io::{Cursor, Read, Write};

use anyhow::{bail, Context, Result};
use polars::io::mmap::MmapBytesReader;
use polars::prelude::{Column, DataType, ParquetReader, SerReader, Series};

use super::super::fields::Scalar;
use super::wire::{self, Kind};

/// Rows decoded at a time: enough to amortise the per-slice overhead of polars, few enough
/// that a slice of decoded columns stays in the tens of megabytes.
const ROWS_PER_SLICE: usize = 1 << 18;

/// Runs the worker on standard input, writing to standard output: the `parquet-worker`
/// command. `columns` are the names the parent reads, in any order; those the file holds
/// are decoded. The exit code is 0 whether or not the file was readable: the stream says
/// which (a write error to the parent, which only happens when the parent is gone, is 2).
pub fn main(columns: &[String]) -> i32 {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let sent = match read_stdin() {
        Ok(mut data) => stream(&mut data, columns, &mut out),
        Err(err) => fail(&mut out, &err),
    };
    match sent.and_then(|()| Ok(out.flush()?)) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// Standard input as something polars can seek in.
fn read_stdin() -> Result<Box<dyn MmapBytesReader>> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let fd = std::io::stdin().as_fd().try_clone_to_owned()?;
        let file = std::fs::File::from(fd);
        if file.metadata()?.is_file() {
            return Ok(Box::new(file));
        }
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .context("could not read the Parquet bytes from the parent")?;
    Ok(Box::new(Cursor::new(bytes)))
}

/// Sends the rows of `data`, or an `E` frame that says why it cannot be read. polars
/// panics on some corrupt files instead of returning an error; the panic becomes the `E`
/// frame, and its message is not printed.
pub fn stream<R: MmapBytesReader>(
    data: &mut R,
    columns: &[String],
    out: &mut impl Write,
) -> Result<()> {
    let result = {
        let _quiet = crate::panics::Quiet::new();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            send_rows(data, columns, out)
        }))
    };
    match result {
        Ok(Ok(())) => wire::write_frame(out, Kind::Done, &[]),
        Ok(Err(err)) => fail(out, &err),
        Err(payload) => {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the reader failed".to_string());
            let why = why.lines().next().unwrap_or("").to_string();
            fail(out, &anyhow::anyhow!(super::corrupt(&why)))
        }
    }
}

fn fail(out: &mut impl Write, err: &anyhow::Error) -> Result<()> {
    wire::write_frame(out, Kind::Error, format!("{err:#}").as_bytes())
}

fn send_rows<R: MmapBytesReader>(
    data: &mut R,
    columns: &[String],
    out: &mut impl Write,
) -> Result<()> {
    let mut reader = ParquetReader::new(&mut *data);
    let schema = reader
        .schema()
        .map_err(|e| anyhow::anyhow!(super::corrupt(&e.to_string())))?;
    let present: Vec<&str> = columns
        .iter()
        .map(String::as_str)
        .filter(|name| schema.contains(name))
        .collect();
    let metadata = reader
        .get_metadata()
        .map_err(|e| anyhow::anyhow!(super::corrupt(&e.to_string())))?
        .clone();
    let rows = metadata.num_rows;
    wire::write_frame(out, Kind::Header, &wire::header(rows as u64, &present))?;
    if present.is_empty() {
        // The parent refuses a file without the columns it needs; nothing to decode.
        return Ok(());
    }
    let mut payload = Vec::with_capacity(wire::ROWS_FRAME_BYTES + (1 << 16));
    let mut offset = 0;
    while offset < rows {
        let len = ROWS_PER_SLICE.min(rows - offset);
        let mut reader = ParquetReader::new(&mut *data)
            .with_columns(Some(present.iter().map(|c| c.to_string()).collect()))
            .with_slice(Some((offset, len)));
        reader.set_metadata(metadata.clone());
        let frame = reader
            .finish()
            .map_err(|e| anyhow::anyhow!(super::corrupt(&e.to_string())))?;
        let series: Vec<Series> = present
            .iter()
            .map(|&name| scalar_series(frame.column(name)?, name))
            .collect::<Result<_>>()?;
        let mut cells = series.iter().map(scalars).collect::<Result<Vec<_>>>()?;
        let mut in_frame = 0u32;
        payload.clear();
        payload.extend_from_slice(&0u32.to_le_bytes());
        for _ in 0..frame.height() {
            for column in &mut cells {
                wire::push_cell(&mut payload, column.next().flatten().as_ref())?;
            }
            in_frame += 1;
            if payload.len() >= wire::ROWS_FRAME_BYTES {
                send(out, &mut payload, &mut in_frame)?;
            }
        }
        if in_frame > 0 {
            send(out, &mut payload, &mut in_frame)?;
        }
        offset += len;
    }
    Ok(())
}

/// Sends the `R` frame in `payload` (its row count still to be filled in) and starts the
/// next one.
fn send(out: &mut impl Write, payload: &mut Vec<u8>, rows: &mut u32) -> Result<()> {
    payload[..4].copy_from_slice(&rows.to_le_bytes());
    wire::write_frame(out, Kind::Rows, payload)?;
    payload.clear();
    payload.extend_from_slice(&0u32.to_le_bytes());
    *rows = 0;
    Ok(())
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
    use std::borrow::Cow;
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

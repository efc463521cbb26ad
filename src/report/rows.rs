//! Per-operation formats: JSON Lines (one object per operation), and CSV and Parquet (via
//! polars, with one `<hop>_attempts` column per hop, like the usual jq funnel one-liner).
//!
//! The rows are written as they come ([`RowWriter`]), CSV and Parquet a batch at a time:
//! the table is never built whole in memory, whatever the number of operations.
//!
//! JSON Lines and Parquet keep the input's IDs as they were (JSON escapes what it must).
//! CSV is opened in spreadsheets, so its text cells go through [`escape::csv_cell`]: a
//! cell that starts with a formula character is prefixed with `'`, and control characters
//! are shown as visible escapes.

use std::borrow::Cow;
use std::io::Write;

use polars::prelude::*;

use crate::escape;

use crate::analysis::tally::RowSink;
use crate::analysis::OperationResult;
use crate::rules::HopOrder;
use crate::summary::OperationRecord;

pub fn records<'a>(
    rows: &'a [OperationResult],
    hops: &'a HopOrder,
) -> impl Iterator<Item = OperationRecord> + 'a {
    rows.iter().map(move |o| OperationRecord::new(o, hops))
}

/// How a text cell is written: [`as_is`] (Parquet), or [`escape::csv_cell`] (CSV).
pub type Cell = for<'t> fn(&'t str) -> Cow<'t, str>;

/// A text cell as the input spelled it.
pub fn as_is(text: &str) -> Cow<'_, str> {
    Cow::Borrowed(text)
}

/// The per-operation table as a polars frame (CSV and Parquet write this), its text cells
/// written by `cell`.
pub fn operation_frame(
    ops: &[OperationResult],
    hops: &HopOrder,
    cell: Cell,
) -> PolarsResult<DataFrame> {
    let mut columns = vec![
        Column::new(
            "test_run_id".into(),
            ops.iter()
                .map(|o| o.key.test_run_id.as_deref().map(|r| cell(r).into_owned()))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "operation_id".into(),
            ops.iter()
                .map(|o| cell(&o.key.operation_id).into_owned())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "class".into(),
            ops.iter().map(|o| o.class.name()).collect::<Vec<_>>(),
        ),
        Column::new(
            "first_multiplying_hop".into(),
            ops.iter()
                .map(|o| {
                    o.first_multiplying_hop
                        .map(|h| cell(hops.name(h)).into_owned())
                })
                .collect::<Vec<_>>(),
        ),
    ];
    for (h, name) in hops.names().iter().enumerate() {
        columns.push(Column::new(
            format!("{name}_attempts").into(),
            ops.iter().map(|o| o.funnel[h]).collect::<Vec<u32>>(),
        ));
    }
    columns.extend([
        Column::new(
            "total_attempts".into(),
            ops.iter().map(|o| o.total_attempts()).collect::<Vec<u64>>(),
        ),
        Column::new(
            "findings".into(),
            ops.iter()
                .map(|o| {
                    let findings = o
                        .findings
                        .iter()
                        .map(|f| f.label(hops).to_string())
                        .collect::<Vec<_>>()
                        .join(";");
                    cell(&findings).into_owned()
                })
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "first_start_ms".into(),
            ops.iter().map(|o| o.first_start_ms).collect::<Vec<_>>(),
        ),
        Column::new(
            "last_finish_ms".into(),
            ops.iter().map(|o| o.last_finish_ms).collect::<Vec<_>>(),
        ),
        Column::new(
            "overlap_ms".into(),
            ops.iter().map(|o| o.overlap_ms).collect::<Vec<_>>(),
        ),
    ]);
    DataFrame::new_infer_height(columns)
}

/// Rows per batch written: polars' row group size, so that the Parquet file has the row
/// groups a whole-table write gives it, however the rows arrive.
const ROWS_PER_BATCH: usize = 512 * 512;

/// Which per-operation format a [`RowWriter`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowFormat {
    Jsonl,
    Csv,
    Parquet,
}

/// Where the batches go.
enum Sink<W: Write> {
    Jsonl(std::io::BufWriter<W>),
    Csv(polars::io::csv::write::BatchedWriter<W>),
    // Boxed: the Parquet writer is large, and there is one sink per run.
    Parquet(Box<polars::io::parquet::write::BatchedWriter<W>>),
}

/// Writes per-operation rows as they come (CSV and Parquet [`ROWS_PER_BATCH`] at a time),
/// in the order given: the same bytes as writing the whole table at once, in bounded
/// memory.
pub struct RowWriter<W: Write> {
    hops: HopOrder,
    batch: Vec<OperationResult>,
    sink: Sink<W>,
}

impl<W: Write> RowWriter<W> {
    pub fn new(format: RowFormat, hops: &HopOrder, out: W) -> anyhow::Result<Self> {
        let schema = || -> PolarsResult<Schema> {
            let cell = match format {
                RowFormat::Csv => escape::csv_cell,
                _ => as_is,
            };
            Ok(operation_frame(&[], hops, cell)?.schema().as_ref().clone())
        };
        let sink = match format {
            RowFormat::Jsonl => Sink::Jsonl(std::io::BufWriter::with_capacity(1 << 20, out)),
            RowFormat::Csv => Sink::Csv(
                CsvWriter::new(out)
                    .include_header(true)
                    .batched(&schema()?)?,
            ),
            RowFormat::Parquet => {
                Sink::Parquet(Box::new(ParquetWriter::new(out).batched(&schema()?)?))
            }
        };
        Ok(RowWriter {
            hops: hops.clone(),
            batch: Vec::new(),
            sink,
        })
    }

    fn flush_batch(&mut self) -> anyhow::Result<()> {
        let hops = &self.hops;
        match &mut self.sink {
            // Written row by row (see `row`): nothing is batched.
            Sink::Jsonl(_) => {}
            Sink::Csv(out) => {
                if !self.batch.is_empty() {
                    out.write_batch(&operation_frame(&self.batch, hops, escape::csv_cell)?)?;
                }
            }
            Sink::Parquet(out) => {
                if !self.batch.is_empty() {
                    out.write_batch(&operation_frame(&self.batch, hops, as_is)?)?;
                }
            }
        }
        self.batch.clear();
        Ok(())
    }

    /// Writes the last batch and ends the file (a CSV of no rows is its header; a Parquet
    /// file gets its footer).
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.flush_batch()?;
        match &mut self.sink {
            Sink::Jsonl(out) => out.flush()?,
            Sink::Csv(out) => out.finish()?,
            Sink::Parquet(out) => {
                out.finish()?;
            }
        }
        Ok(())
    }
}

/// The merge's rows, as it makes them: a JSON Lines row is written at once (into the
/// buffered writer), a CSV or Parquet row joins the batch, written when full.
impl<W: Write> RowSink for RowWriter<W> {
    fn row(&mut self, row: &OperationResult) -> anyhow::Result<()> {
        if let Sink::Jsonl(out) = &mut self.sink {
            serde_json::to_writer(&mut *out, &OperationRecord::new(row, &self.hops))?;
            out.write_all(b"\n")?;
            return Ok(());
        }
        self.batch.push(row.clone());
        if self.batch.len() == ROWS_PER_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }
}

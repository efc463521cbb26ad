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
    let mut columns = Columns::new(hops, cell, ops.len());
    for o in ops {
        columns.push(o, hops);
    }
    columns.finish(hops)
}

/// The per-operation table's columns, filled a row at a time: text goes straight into the
/// column's buffer, so a row costs no allocation of its own (the writer's batches were
/// clones of the rows, turned into columns cell by cell).
struct Columns {
    cell: Cell,
    test_run_id: StringChunkedBuilder,
    operation_id: StringChunkedBuilder,
    class: StringChunkedBuilder,
    first_multiplying_hop: StringChunkedBuilder,
    /// Per hop, in hop order.
    attempts: Vec<Vec<u32>>,
    total_attempts: Vec<u64>,
    findings: StringChunkedBuilder,
    first_start_ms: Vec<f64>,
    last_finish_ms: Vec<Option<f64>>,
    overlap_ms: Vec<f64>,
    /// One row's findings, written before they go through `cell`.
    scratch: String,
}

impl Columns {
    fn new(hops: &HopOrder, cell: Cell, rows: usize) -> Columns {
        let text = |name: &str| StringChunkedBuilder::new(name.into(), rows);
        Columns {
            cell,
            test_run_id: text("test_run_id"),
            operation_id: text("operation_id"),
            class: text("class"),
            first_multiplying_hop: text("first_multiplying_hop"),
            // One by one: `vec![v; n]` clones `v`, and a clone drops the capacity.
            attempts: (0..hops.len()).map(|_| Vec::with_capacity(rows)).collect(),
            total_attempts: Vec::with_capacity(rows),
            findings: text("findings"),
            first_start_ms: Vec::with_capacity(rows),
            last_finish_ms: Vec::with_capacity(rows),
            overlap_ms: Vec::with_capacity(rows),
            scratch: String::new(),
        }
    }

    fn push(&mut self, o: &OperationResult, hops: &HopOrder) {
        let cell = self.cell;
        self.test_run_id
            .append_option(o.key.test_run_id.as_deref().map(cell));
        self.operation_id.append_value(cell(&o.key.operation_id));
        self.class.append_value(o.class.name());
        self.first_multiplying_hop
            .append_option(o.first_multiplying_hop.map(|h| cell(hops.name(h))));
        for (column, &n) in self.attempts.iter_mut().zip(&o.funnel) {
            column.push(n);
        }
        self.total_attempts.push(o.total_attempts());
        self.scratch.clear();
        for (i, f) in o.findings.iter().enumerate() {
            if i > 0 {
                self.scratch.push(';');
            }
            // Writing to a String cannot fail.
            let _ = f.write_label(hops, &mut self.scratch);
        }
        self.findings.append_value(cell(&self.scratch));
        self.first_start_ms.push(o.first_start_ms);
        self.last_finish_ms.push(o.last_finish_ms);
        self.overlap_ms.push(o.overlap_ms);
    }

    fn finish(self, hops: &HopOrder) -> PolarsResult<DataFrame> {
        let mut columns = vec![
            self.test_run_id.finish().into_column(),
            self.operation_id.finish().into_column(),
            self.class.finish().into_column(),
            self.first_multiplying_hop.finish().into_column(),
        ];
        for (name, attempts) in hops.names().iter().zip(self.attempts) {
            columns.push(Column::new(format!("{name}_attempts").into(), attempts));
        }
        columns.extend([
            Column::new("total_attempts".into(), self.total_attempts),
            self.findings.finish().into_column(),
            Column::new("first_start_ms".into(), self.first_start_ms),
            Column::new("last_finish_ms".into(), self.last_finish_ms),
            Column::new("overlap_ms".into(), self.overlap_ms),
        ]);
        DataFrame::new_infer_height(columns)
    }
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
    /// The batch being filled (CSV and Parquet) and how many rows it holds.
    batch: Columns,
    rows: usize,
    sink: Sink<W>,
}

impl<W: Write> RowWriter<W> {
    pub fn new(format: RowFormat, hops: &HopOrder, out: W) -> anyhow::Result<Self> {
        let cell = match format {
            RowFormat::Csv => escape::csv_cell,
            _ => as_is,
        };
        let schema = || -> PolarsResult<Schema> {
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
        let batch_rows = match format {
            RowFormat::Jsonl => 0,
            _ => ROWS_PER_BATCH,
        };
        Ok(RowWriter {
            hops: hops.clone(),
            batch: Columns::new(hops, cell, batch_rows),
            rows: 0,
            sink,
        })
    }

    fn flush_batch(&mut self) -> anyhow::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let hops = &self.hops;
        let next = Columns::new(hops, self.batch.cell, ROWS_PER_BATCH);
        let full = std::mem::replace(&mut self.batch, next);
        self.rows = 0;
        match &mut self.sink {
            // Written row by row (see `row`): nothing is batched.
            Sink::Jsonl(_) => {}
            Sink::Csv(out) => out.write_batch(&full.finish(hops)?)?,
            Sink::Parquet(out) => out.write_batch(&full.finish(hops)?)?,
        }
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
        self.batch.push(row, &self.hops);
        self.rows += 1;
        if self.rows == ROWS_PER_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }
}

//! Per-operation formats: JSON Lines (one object per operation), and CSV and Parquet (via
//! polars, with one `<hop>_attempts` column per hop, like the usual jq funnel one-liner).
//!
//! The rows are written as they come ([`RowWriter`]), JSON Lines and CSV a row at a time,
//! Parquet a batch at a time: the table is never built whole in memory, whatever the
//! number of operations. CSV is written here, not by polars: the same bytes (a test holds
//! the two to it), without building columns only to turn them back into rows.
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
        findings_text(o, hops, &mut self.scratch);
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

/// The findings cell of CSV and Parquet, written into `out` (emptied first): `kind@hop`
/// joined with `;`.
fn findings_text(o: &OperationResult, hops: &HopOrder, out: &mut String) {
    out.clear();
    for (i, f) in o.findings.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        // Writing to a String cannot fail.
        let _ = f.write_label(hops, out);
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

/// Where the rows go.
enum Sink<W: Write> {
    Jsonl(std::io::BufWriter<W>),
    Csv(CsvRows<W>),
    // Boxed: the Parquet writer is large, and there is one sink per run.
    Parquet(Box<polars::io::parquet::write::BatchedWriter<W>>),
}

/// Writes per-operation rows as they come (Parquet [`ROWS_PER_BATCH`] at a time),
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
        // Only Parquet fills the batch, and it keeps text as the input spelled it (CSV
        // escapes its cells as it writes them, in `CsvRows`).
        let cell = as_is;
        let schema = || -> PolarsResult<Schema> {
            Ok(operation_frame(&[], hops, cell)?.schema().as_ref().clone())
        };
        let sink = match format {
            RowFormat::Jsonl => Sink::Jsonl(std::io::BufWriter::with_capacity(1 << 20, out)),
            RowFormat::Csv => Sink::Csv(CsvRows::new(out, &schema()?, hops)?),
            RowFormat::Parquet => {
                Sink::Parquet(Box::new(ParquetWriter::new(out).batched(&schema()?)?))
            }
        };
        let batch_rows = match format {
            RowFormat::Parquet => ROWS_PER_BATCH,
            _ => 0,
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
            Sink::Jsonl(_) | Sink::Csv(_) => {}
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
            Sink::Csv(out) => out.out.flush()?,
            Sink::Parquet(out) => {
                out.finish()?;
            }
        }
        Ok(())
    }
}

/// The merge's rows, as it makes them: a JSON Lines or CSV row is written at once (into the
/// buffered writer), a Parquet row joins the batch, written when full.
impl<W: Write> RowSink for RowWriter<W> {
    fn row(&mut self, row: &OperationResult) -> anyhow::Result<()> {
        match &mut self.sink {
            Sink::Jsonl(out) => {
                serde_json::to_writer(&mut *out, &OperationRecord::new(row, &self.hops))?;
                out.write_all(b"\n")?;
                return Ok(());
            }
            Sink::Csv(out) => return out.row(row, &self.hops),
            Sink::Parquet(_) => {}
        }
        self.batch.push(row, &self.hops);
        self.rows += 1;
        if self.rows == ROWS_PER_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }
}

/// The per-operation table as CSV, written a row at a time as polars writes the frame of
/// [`operation_frame`] with its defaults: a header of the column names; a text cell quoted
/// when it holds a comma, a quote or a line break (its quotes doubled), an empty one as
/// `""` and a missing one as nothing; floats in their shortest round-trip form (zmij, as
/// polars); `\n` after each row.
struct CsvRows<W: Write> {
    out: std::io::BufWriter<W>,
    /// Each hop's name as its cell, escaped once rather than for every row.
    hop_cells: Vec<Vec<u8>>,
    /// The row being written.
    line: Vec<u8>,
    /// One row's findings, written before they go through [`escape::csv_cell`].
    findings: String,
}

impl<W: Write> CsvRows<W> {
    /// Writes the header (a table of no rows is its header).
    fn new(out: W, schema: &Schema, hops: &HopOrder) -> std::io::Result<CsvRows<W>> {
        let mut header = Vec::new();
        for (i, name) in schema.iter_names().enumerate() {
            if i > 0 {
                header.push(b',');
            }
            csv_text(&mut header, Some(name));
        }
        header.push(b'\n');
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        out.write_all(&header)?;
        let hop_cells = (0..hops.len())
            .map(|hop| {
                let mut cell = Vec::new();
                csv_cell_text(&mut cell, hops.name(hop as u16));
                cell
            })
            .collect();
        Ok(CsvRows {
            out,
            hop_cells,
            line: Vec::new(),
            findings: String::new(),
        })
    }

    fn row(&mut self, o: &OperationResult, hops: &HopOrder) -> anyhow::Result<()> {
        let line = &mut self.line;
        if let Some(run) = &o.key.test_run_id {
            csv_cell_text(line, run);
        }
        line.push(b',');
        csv_cell_text(line, &o.key.operation_id);
        line.push(b',');
        // A class name is a plain cell (a test holds every one to it).
        line.extend_from_slice(o.class.name().as_bytes());
        line.push(b',');
        if let Some(hop) = o.first_multiplying_hop {
            line.extend_from_slice(&self.hop_cells[usize::from(hop)]);
        }
        for &n in &o.funnel {
            line.push(b',');
            line.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        }
        line.push(b',');
        line.extend_from_slice(itoa::Buffer::new().format(o.total_attempts()).as_bytes());
        line.push(b',');
        findings_text(o, hops, &mut self.findings);
        csv_cell_text(line, &self.findings);
        for ms in [Some(o.first_start_ms), o.last_finish_ms, Some(o.overlap_ms)] {
            line.push(b',');
            if let Some(ms) = ms {
                float_cell(line, ms);
            }
        }
        line.push(b'\n');
        self.out.write_all(line)?;
        line.clear();
        Ok(())
    }
}

/// Below this, a whole number's shortest round-trip form is its digits and `.0`.
const WHOLE_FLOAT_BELOW: f64 = 1e15;

/// A float cell in its shortest round-trip form, as zmij writes it. Times are whole
/// milliseconds in most logs (and an overlap mostly `0.0`): those are written as the
/// integer they are and `.0`, without the general shortest-form search; tests hold the
/// two paths to the same text.
fn float_cell(line: &mut Vec<u8>, ms: f64) {
    let whole = ms as i64;
    // `ms as i64` truncates, and saturates or gives 0 for what no i64 holds: equal back
    // only for a whole number. `-0.0` is equal to `0.0` but written with its sign.
    if whole as f64 == ms && (0.0..WHOLE_FLOAT_BELOW).contains(&ms) && ms.is_sign_positive() {
        line.extend_from_slice(itoa::Buffer::new().format(whole).as_bytes());
        line.extend_from_slice(b".0");
    } else {
        line.extend_from_slice(zmij::Buffer::new().format(ms).as_bytes());
    }
}

/// A text cell as [`escape::csv_cell`] makes it, written by [`csv_text`]. Most cells (IDs,
/// class and hop names, findings) are plain, and are written as they are without either
/// step (both scan the text, the second twice with `memchr`, whose setup outweighs cells
/// this short).
fn csv_cell_text(line: &mut Vec<u8>, text: &str) {
    if escape::csv_plain(text) {
        line.extend_from_slice(text.as_bytes());
    } else {
        csv_text(line, Some(&escape::csv_cell(text)));
    }
}

/// A CSV text cell as polars writes one (its `QuoteStyle::Necessary`): nothing for a
/// missing value, `""` for an empty one (else the two read back alike), quoted when it
/// holds a comma, a quote or a line break, with its quotes doubled.
fn csv_text(line: &mut Vec<u8>, text: Option<&str>) {
    let Some(text) = text else {
        return;
    };
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        line.extend_from_slice(b"\"\"");
        return;
    }
    let quoted = memchr::memchr3(b',', b'"', b'\n', bytes).is_some()
        || memchr::memchr(b'\r', bytes).is_some();
    if !quoted {
        line.extend_from_slice(bytes);
        return;
    }
    line.push(b'"');
    for part in bytes.split_inclusive(|&b| b == b'"') {
        line.extend_from_slice(part);
        if part.ends_with(b"\"") {
            line.push(b'"');
        }
    }
    line.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::FinalOutcome;
    use crate::classify::{Class, Finding, FindingKind};
    use crate::model::OperationKey;
    use proptest::prelude::*;

    /// The CSV polars writes of the whole table: what [`CsvRows`] must write.
    fn by_polars(rows: &[OperationResult], hops: &HopOrder) -> Vec<u8> {
        let mut frame = operation_frame(rows, hops, escape::csv_cell).expect("a frame");
        let mut out = Vec::new();
        CsvWriter::new(&mut out)
            .include_header(true)
            .finish(&mut frame)
            .expect("written");
        out
    }

    fn by_row_writer(rows: &[OperationResult], hops: &HopOrder) -> Vec<u8> {
        let mut out = Vec::new();
        let mut writer = RowWriter::new(RowFormat::Csv, hops, &mut out).expect("a writer");
        for row in rows {
            writer.row(row).expect("written");
        }
        writer.finish().expect("finished");
        out
    }

    fn row(
        hops: &HopOrder,
        run: Option<&str>,
        id: &str,
        floats: [f64; 3],
        last: bool,
        hop: Option<u16>,
    ) -> OperationResult {
        OperationResult {
            key: OperationKey {
                test_run_id: run.map(Into::into),
                operation_id: id.into(),
            },
            class: Class::NestedRetry,
            first_multiplying_hop: hop,
            funnel: (0..hops.len() as u32)
                .map(|h| [1, u32::MAX, 0][h as usize % 3])
                .collect(),
            findings: hop
                .map(|hop| {
                    vec![
                        Finding {
                            kind: FindingKind::Retries,
                            hop,
                        },
                        Finding {
                            kind: FindingKind::FanOut,
                            hop: 0,
                        },
                    ]
                })
                .unwrap_or_default(),
            first_start_ms: floats[0],
            last_finish_ms: last.then_some(floats[1]),
            overlap_ms: floats[2],
            final_outcome: FinalOutcome::Success,
        }
    }

    /// Text that needs quoting, escaping or a formula guard, and floats of every form the
    /// shortest round-trip text takes (integral, fractions, exponents both ways, -0).
    #[test]
    fn every_class_name_is_a_plain_csv_cell() {
        // The CSV writer writes class names as they are, unchecked.
        for class in Class::ALL {
            assert!(escape::csv_plain(class.name()), "{}", class.name());
        }
    }

    #[test]
    fn csv_rows_are_the_bytes_polars_writes() {
        // Hop names with a comma and a quote: the header is quoted as cells are.
        let hops = HopOrder::new(vec!["caller".into(), "gate,way".into(), "de\"p".into()]).unwrap();
        let texts = [
            "op-1",
            "",
            "a,b",
            "say \"hi\"",
            "\"",
            "\"\"",
            "line\nbreak",
            "cr\rhere",
            "=SUM(A1)",
            "+1",
            "-x",
            "@me",
            "café ✓",
            "tab\there",
            "\u{1b}[31m",
            " lead",
        ];
        let floats = [
            0.0,
            -0.0,
            1.0,
            0.1,
            1700000000001.0,
            1700000000001.5,
            123456.789,
            1e-7,
            1.5e-300,
            5e-324,
            1e15,
            1e16,
            1e17,
            1.2345e21,
            1e22,
            f64::MAX,
            -2.5,
            9007199254740993.0,
        ];
        let mut rows = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            for (j, f) in floats.iter().enumerate() {
                let run = [None, Some(*text), Some("run-1")][(i + j) % 3];
                let hop = [None, Some(1), Some(2)][j % 3];
                let other = floats[(j + i) % floats.len()];
                rows.push(row(&hops, run, text, [*f, other, -f], j % 2 == 0, hop));
            }
        }
        assert_eq!(
            String::from_utf8_lossy(&by_row_writer(&rows, &hops)),
            String::from_utf8_lossy(&by_polars(&rows, &hops))
        );
        // No rows: the header alone.
        assert_eq!(by_row_writer(&[], &hops), by_polars(&[], &hops));
    }

    proptest! {
        #[test]
        fn any_text_and_float_is_written_as_polars_writes_it(
            // Mostly the characters that CSV quotes or a spreadsheet guard changes.
            run in proptest::option::of("([a,\"\\r\\n =+@-]|.){0,12}"),
            id in "([a,\"\\r\\n =+@-]|.){0,16}",
            bits in proptest::array::uniform3(any::<u64>()),
            last: bool,
        ) {
            // Any finite float, from its bits: NaN and infinities are never times.
            let floats = bits.map(|b| Some(f64::from_bits(b)).filter(|f| f.is_finite()).unwrap_or(1.5));
            let hops = HopOrder::default();
            let rows = [row(&hops, run.as_deref(), &id, floats, last, Some(1))];
            prop_assert_eq!(by_row_writer(&rows, &hops), by_polars(&rows, &hops));
        }

        /// Whole milliseconds take the integer shortcut: the same text as zmij's.
        #[test]
        fn a_whole_float_is_written_as_zmij_writes_it(
            whole in -2_000_000_000_000_000i64..2_000_000_000_000_000,
            scale in 0u32..16,
        ) {
            // Both ends of the range: numbers of every length, not only the longest.
            let ms = (whole / 10i64.pow(scale)) as f64;
            let mut fast = Vec::new();
            float_cell(&mut fast, ms);
            let mut zmij = zmij::Buffer::new();
            prop_assert_eq!(fast, zmij.format(ms).as_bytes());
        }

        /// The plain cell's shortcut writes what the escape and the quoting would.
        #[test]
        fn a_cell_taken_as_plain_is_written_as_escaped_and_quoted(
            text in "([a,\"\\r\\n\t =+@'-]|.){0,16}",
        ) {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            csv_cell_text(&mut fast, &text);
            csv_text(&mut slow, Some(&escape::csv_cell(&text)));
            prop_assert_eq!(fast, slow);
        }
    }

    #[test]
    fn floats_at_the_edges_of_the_whole_shortcut_are_written_as_zmij_writes_them() {
        let mut edges = vec![
            0.0,
            -0.0,
            0.5,
            -1.0,
            2f64.powi(53),
            2f64.powi(53) + 2.0,
            1e300,
        ];
        for k in 0..=17 {
            let p = 10f64.powi(k);
            edges.extend([p - 1.0, p, p + 1.0, p - 0.5, -p]);
        }
        edges.extend([
            WHOLE_FLOAT_BELOW - 1.0,
            WHOLE_FLOAT_BELOW,
            1_700_000_000_001.0,
        ]);
        for ms in edges {
            let mut fast = Vec::new();
            float_cell(&mut fast, ms);
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                zmij::Buffer::new().format(ms),
                "{ms:?}"
            );
        }
    }

    #[test]
    fn plain_cells_are_the_usual_ids_and_names() {
        for plain in ["op-0000001", "run-1", "caller", "retry_storm", "a b", "x=1"] {
            assert!(escape::csv_plain(plain), "{plain}");
        }
        for not in [
            "",
            "a,b",
            "say \"hi\"",
            "=1+2",
            "-1",
            "+x",
            "@me",
            "\tx",
            "a\nb",
            "café",
        ] {
            assert!(!escape::csv_plain(not), "{not}");
        }
    }
}

//! Per-operation formats: JSON Lines (one object per operation), and CSV and Parquet (via
//! polars, with one `<hop>_attempts` column per hop, like the usual jq funnel one-liner).
//!
//! JSON Lines and Parquet keep the input's IDs as they were (JSON escapes what it must).
//! CSV is opened in spreadsheets, so its text cells go through [`escape::csv_cell`]: a
//! cell that starts with a formula character is prefixed with `'`, and control characters
//! are shown as visible escapes.

use std::borrow::Cow;

use polars::prelude::*;

use crate::escape;

use crate::analysis::Analysis;
use crate::rules::HopOrder;
use crate::summary::OperationRecord;

pub fn records<'a>(
    analysis: &'a Analysis,
    hops: &'a HopOrder,
) -> impl Iterator<Item = OperationRecord> + 'a {
    analysis
        .operations
        .iter()
        .map(move |o| OperationRecord::new(o, hops))
}

pub fn jsonl(analysis: &Analysis, hops: &HopOrder) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for record in records(analysis, hops) {
        serde_json::to_writer(&mut out, &record)?;
        out.push(b'\n');
    }
    Ok(out)
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
    analysis: &Analysis,
    hops: &HopOrder,
    cell: Cell,
) -> PolarsResult<DataFrame> {
    let ops = &analysis.operations;
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

pub fn csv(analysis: &Analysis, hops: &HopOrder) -> anyhow::Result<Vec<u8>> {
    let mut frame = operation_frame(analysis, hops, escape::csv_cell)?;
    let mut out = Vec::new();
    CsvWriter::new(&mut out)
        .include_header(true)
        .finish(&mut frame)?;
    Ok(out)
}

/// The per-operation table as a Parquet file (polars' default compression, zstd).
pub fn parquet(analysis: &Analysis, hops: &HopOrder) -> anyhow::Result<Vec<u8>> {
    let mut frame = operation_frame(analysis, hops, as_is)?;
    let mut out = Vec::new();
    ParquetWriter::new(&mut out).finish(&mut frame)?;
    Ok(out)
}

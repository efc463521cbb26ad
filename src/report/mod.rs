//! Report: renders the computed summary (or the per-operation rows) in the chosen format.
//! Every renderer takes the same computed values and returns bytes; where they go (a file
//! or stdout) is decided once, in `main`.

mod compare;
mod html;
mod layout;
mod markdown;
mod rows;
mod show;
mod table;

use serde::Serialize;

use crate::gate::GateReport;
use crate::model::named_enum;
use crate::rules::Rules;
use crate::summary::{OperationView, Summary};
pub use rows::{RowFormat, RowWriter};

named_enum! {
    /// The output formats of `analyze` (`--format`, by these names).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum OutputFormat {
        Table => "table",
        Json => "json",
        Jsonl => "jsonl",
        Csv => "csv",
        Markdown => "markdown",
        /// The per-operation rows as a Parquet file (binary: only to `--output FILE`).
        Parquet => "parquet",
        Html => "html",
        /// A partial: the partition's result before the merge (`analyze` only). Written by
        /// `crate::partial::format`, never rendered from a summary.
        Partial => "partial",
    }
}

impl OutputFormat {
    /// Why a report cannot be rendered in this format, if it cannot.
    pub fn refusal(self) -> Option<&'static str> {
        (self == OutputFormat::Partial).then_some(
            "--format partial is written by `analyze` before the merge; this command writes reports: choose another --format",
        )
    }
}

/// How the terminal reports (`--format table`, `show`) are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    /// The terminal's width in columns when stdout is a terminal: the tables drop their
    /// least important columns and wrap cells to fit. `None` (piped) draws full width.
    pub width: Option<usize>,
    /// Colour class names and verdicts with ANSI escapes (`--color`).
    pub color: bool,
    /// ASCII characters only (`--ascii`).
    pub ascii: bool,
}

/// The JSON document: the summary's fields, then the gate's verdict when conditions were
/// given (`--format json`).
#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    /// The CI gate's verdict; absent when no condition was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<&'a GateReport>,
}

/// Renders the report of an analysis, with the gate's verdict when there is one.
pub fn render(
    format: OutputFormat,
    summary: &Summary,
    gate: Option<&GateReport>,
    style: &Style,
) -> anyhow::Result<Vec<u8>> {
    Ok(match format {
        OutputFormat::Table => table::render(summary, gate, style).into_bytes(),
        OutputFormat::Json => {
            let mut out = serde_json::to_vec_pretty(&JsonReport { summary, gate })?;
            out.push(b'\n');
            out
        }
        // Written row by row as the merge makes them ([`RowWriter`]), never rendered.
        OutputFormat::Jsonl | OutputFormat::Csv | OutputFormat::Parquet => anyhow::bail!(
            "per-operation rows are written as the analysis makes them, not rendered from a summary"
        ),
        OutputFormat::Markdown => markdown::render(summary, gate).into_bytes(),
        OutputFormat::Html => html::render(summary, gate).into_bytes(),
        OutputFormat::Partial => anyhow::bail!(OutputFormat::Partial.refusal().unwrap_or_default()),
    })
}

/// The per-operation format `format` is, if it is one: its rows are written as they come
/// ([`RowWriter`]) rather than rendered whole.
pub fn row_format(format: OutputFormat) -> Option<RowFormat> {
    match format {
        OutputFormat::Jsonl => Some(RowFormat::Jsonl),
        OutputFormat::Csv => Some(RowFormat::Csv),
        OutputFormat::Parquet => Some(RowFormat::Parquet),
        _ => None,
    }
}

/// Renders the comparison report of `replay` or `diff`. The analyses are those of the two
/// sides where they were read from attempt logs (`None` for a saved summary).
pub fn render_comparison(
    format: OutputFormat,
    comparison: &crate::compare::Comparison,
    before: Option<&crate::analysis::tally::Collected>,
    after: Option<&crate::analysis::tally::Collected>,
    rules: &Rules,
    style: &Style,
) -> anyhow::Result<Vec<u8>> {
    compare::render(format, comparison, before, after, rules, style)
}

/// `show`: one operation in the terminal.
pub fn show(view: &OperationView, style: &Style) -> String {
    show::render(view, style)
}

/// `--ascii`: the report's box-drawing and typographic characters as ASCII, one character
/// for one so that columns stay aligned.
pub fn ascii(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '→' => '>',
            '×' => 'x',
            '–' | '—' | '−' | '─' => '-',
            '│' | '├' => '|',
            '└' => '`',
            '…' => '~',
            other => other,
        })
        .collect()
}

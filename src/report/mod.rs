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

use crate::analysis::Analysis;
use crate::config::{OutputFormat, Rules};
use crate::summary::{OperationView, Summary};

/// Renders the report of an analysis.
pub fn render(
    format: OutputFormat,
    summary: &Summary,
    analysis: &Analysis,
    rules: &Rules,
) -> anyhow::Result<Vec<u8>> {
    Ok(match format {
        OutputFormat::Table => table::render(summary).into_bytes(),
        OutputFormat::Json => {
            let mut out = serde_json::to_vec_pretty(summary)?;
            out.push(b'\n');
            out
        }
        OutputFormat::Jsonl => rows::jsonl(analysis, &rules.hops)?,
        OutputFormat::Csv => rows::csv(analysis, &rules.hops)?,
        OutputFormat::Markdown => markdown::render(summary).into_bytes(),
        OutputFormat::Parquet => rows::parquet(analysis, &rules.hops)?,
        OutputFormat::Html => html::render(summary).into_bytes(),
    })
}

/// Renders the comparison report of `replay` or `diff`. The analyses are those of the two
/// sides where they were read from attempt logs (`None` for a saved summary).
pub fn render_comparison(
    format: OutputFormat,
    comparison: &crate::compare::Comparison,
    before: Option<&Analysis>,
    after: Option<&Analysis>,
    rules: &Rules,
) -> anyhow::Result<Vec<u8>> {
    compare::render(format, comparison, before, after, rules)
}

/// `show`: one operation in the terminal.
pub fn show(view: &OperationView) -> String {
    show::render(view)
}

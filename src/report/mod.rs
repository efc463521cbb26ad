//! Report: renders the computed summary (or the per-operation rows) in the chosen format.
//! Every renderer takes the same computed values and returns bytes; where they go (a file
//! or stdout) is decided once, in `main`.

mod html;
mod layout;
mod markdown;
mod rows;
mod show;
mod table;

use crate::analysis::Analysis;
use crate::config::{OutputFormat, Rules, Style};
use crate::summary::{OperationView, Summary};

/// Renders the report of an analysis.
pub fn render(
    format: OutputFormat,
    summary: &Summary,
    analysis: &Analysis,
    rules: &Rules,
    style: &Style,
) -> anyhow::Result<Vec<u8>> {
    Ok(match format {
        OutputFormat::Table => table::render(summary, style).into_bytes(),
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

//! GitHub-flavoured Markdown: the shared layout as `###` sections under one `##` title (so
//! that it nests inside an incident document or a CI job summary), pipe tables, and lines
//! of text as bullet lists. Identifiers are written as code, and every other cell is
//! escaped, so that no operation ID or hop name turns into markup or a link.

use super::layout::{headline, sections, Section};
use crate::escape::{markdown_code as code, markdown_row as row, markdown_text as escape};
use crate::gate::GateReport;
use crate::summary::Summary;

pub fn render(summary: &Summary, gate: Option<&GateReport>) -> String {
    draw(
        "attempt-funnel report",
        &headline(summary),
        &summary.input.files,
        &sections(summary, gate),
    )
}

/// A title, a headline, the inputs and sections as Markdown (the comparison report draws
/// its own).
pub fn draw(title: &str, headline: &str, files: &[String], sections: &[Section]) -> String {
    let mut out = format!("## {}\n\n**{}**\n", escape(title), escape(headline));
    if !files.is_empty() {
        let files: Vec<String> = files.iter().map(|f| code(f)).collect();
        out.push_str(&format!("\nRead from {}.\n", files.join(", ")));
    }
    for section in sections {
        out.push_str(&format!("\n### {}\n\n", escape(&section.title)));
        if section.headers.is_empty() {
            for note in &section.notes {
                out.push_str(&format!("- {}\n", escape(note)));
            }
            continue;
        }
        out.push_str(&row(&section
            .headers
            .iter()
            .map(|h| escape(h))
            .collect::<Vec<_>>()));
        let align: Vec<String> = section
            .numeric
            .iter()
            .map(|&n| if n { "---:" } else { "---" }.to_string())
            .collect();
        out.push_str(&row(&align));
        for r in &section.rows {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if section.code.get(i).copied().unwrap_or(false) {
                        code_list(c)
                    } else {
                        escape(c)
                    }
                })
                .collect();
            out.push_str(&row(&cells));
        }
        if !section.notes.is_empty() {
            out.push('\n');
        }
        for note in &section.notes {
            out.push_str(&escape(note));
            out.push('\n');
        }
    }
    out
}

/// Each item of a comma-separated list of identifiers as code.
fn code_list(text: &str) -> String {
    text.split(", ").map(code).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifier_lists_become_code_spans() {
        assert_eq!(
            code_list("retries@caller, overlap@api.v2"),
            "`retries@caller`, `overlap@api.v2`"
        );
        assert_eq!(code_list(""), "");
    }
}

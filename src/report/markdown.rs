//! GitHub-flavoured Markdown: the shared layout as `###` sections under one `##` title (so
//! that it nests inside an incident document or a CI job summary), pipe tables, and lines
//! of text as bullet lists. Identifiers are written as code, and every other cell is
//! escaped, so that no operation ID or hop name turns into markup or a link.

use super::layout::{headline, sections, Section};
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

/// One table row. A pipe would end the cell, even inside code; an empty cell is kept.
fn row(cells: &[String]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| {
            if c.is_empty() {
                " ".to_string()
            } else {
                c.replace('|', "\\|")
            }
        })
        .collect();
    format!("| {} |\n", cells.join(" | "))
}

/// Backslash-escapes the characters that Markdown would read as emphasis, links, HTML or
/// code (pipes are left to [`row`]).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '~'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A code span that holds `text` as it is, whatever backticks it contains.
fn code(text: &str) -> String {
    if text.is_empty() || text == "–" {
        return text.to_string();
    }
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// Each item of a comma-separated list of identifiers as code.
fn code_list(text: &str) -> String {
    text.split(", ").map(code).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_become_code_spans_that_survive_backticks() {
        assert_eq!(code("run-3/op-1"), "`run-3/op-1`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(
            code_list("retries@caller, overlap@api.v2"),
            "`retries@caller`, `overlap@api.v2`"
        );
        assert_eq!(code_list(""), "");
    }

    #[test]
    fn markup_in_text_cells_is_escaped() {
        assert_eq!(escape("op_1 *x* <b>"), "op\\_1 \\*x\\* \\<b\\>");
        assert_eq!(row(&["a|b".into(), "".into()]), "| a\\|b |   |\n");
    }
}

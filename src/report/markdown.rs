//! GitHub-flavoured Markdown: the shared layout as `##` sections and pipe tables, for
//! incident documents and CI job summaries.

use super::layout::{headline, sections};
use crate::summary::Summary;

pub fn render(summary: &Summary) -> String {
    let mut out = format!("# attempt-funnel report\n\n**{}**\n", headline(summary));
    for section in sections(summary) {
        out.push_str(&format!("\n## {}\n\n", section.title));
        if !section.headers.is_empty() {
            out.push_str(&row(&section.headers));
            let align: Vec<String> = section
                .numeric
                .iter()
                .map(|&n| {
                    if n {
                        "---:".to_string()
                    } else {
                        "---".to_string()
                    }
                })
                .collect();
            out.push_str(&row(&align));
            for r in &section.rows {
                out.push_str(&row(r));
            }
            if !section.notes.is_empty() {
                out.push('\n');
            }
        }
        for note in &section.notes {
            out.push_str(note);
            out.push('\n');
        }
    }
    out
}

fn row(cells: &[String]) -> String {
    let cells: Vec<String> = cells.iter().map(|c| cell(c)).collect();
    format!("| {} |\n", cells.join(" | "))
}

/// Pipes would end the cell; an empty cell is kept visible.
fn cell(text: &str) -> String {
    if text.is_empty() {
        " ".to_string()
    } else {
        text.replace('|', "\\|")
    }
}

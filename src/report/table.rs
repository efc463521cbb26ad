//! The terminal report: the shared layout drawn with comfy-table.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};

use super::layout::{headline, sections, Section};
use crate::gate::GateReport;
use crate::summary::Summary;

pub fn render(summary: &Summary, gate: Option<&GateReport>) -> String {
    draw(&headline(summary), &sections(summary, gate))
}

/// A headline and sections as terminal tables (the comparison report draws its own).
pub fn draw(headline: &str, sections: &[Section]) -> String {
    let mut out = format!("attempt-funnel — {headline}\n");
    for section in sections {
        out.push_str(&format!("\n{}\n", section.title));
        if !section.headers.is_empty() {
            let mut table = Table::new();
            table
                .load_preset(UTF8_FULL_CONDENSED)
                .set_header(&section.headers);
            for row in &section.rows {
                table.add_row(row);
            }
            for (i, numeric) in section.numeric.iter().enumerate() {
                if let (true, Some(column)) = (*numeric, table.column_mut(i)) {
                    column.set_cell_alignment(CellAlignment::Right);
                }
            }
            out.push_str(&table.to_string());
            out.push('\n');
        }
        for note in &section.notes {
            out.push_str(note);
            out.push('\n');
        }
    }
    out
}

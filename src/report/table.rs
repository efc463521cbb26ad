//! The terminal report: the shared layout drawn with comfy-table, every cell escaped for
//! the terminal (an ID cannot recolour or clear it).

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, Table};

use super::layout::{headline, sections};
use crate::escape::terminal;
use crate::gate::GateReport;
use crate::summary::Summary;

pub fn render(summary: &Summary, gate: Option<&GateReport>) -> String {
    let mut out = format!("attempt-funnel — {}\n", terminal(&headline(summary)));
    for section in sections(summary, gate) {
        out.push_str(&format!("\n{}\n", terminal(&section.title)));
        if !section.headers.is_empty() {
            let mut table = Table::new();
            table
                .load_preset(UTF8_FULL_CONDENSED)
                .set_header(section.headers.iter().map(|h| terminal(h).into_owned()));
            for row in &section.rows {
                table.add_row(row.iter().map(|cell| terminal(cell).into_owned()));
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
            out.push_str(&terminal(note));
            out.push('\n');
        }
    }
    out
}

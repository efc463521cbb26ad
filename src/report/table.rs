//! The terminal report: the shared layout drawn with comfy-table. Piped, every table is drawn
//! at full width; on a terminal ([`Style::width`]) each table takes its short headers, drops
//! its least important columns until it fits, and wraps what is left to the width. Every
//! cell and line is escaped for the terminal first ([`terminal`]): an ID cannot recolour,
//! retitle or clear it.

use comfy_table::presets::{ASCII_FULL_CONDENSED, UTF8_FULL_CONDENSED};
use comfy_table::{Cell, CellAlignment, Color, ContentArrangement, Table};

use super::layout::{headline, sections, tone_of, wrap, Section, Tone};
use super::Style;
use crate::escape::terminal;
use crate::gate::GateReport;
use crate::summary::Summary;

/// Narrowest width the tables are fitted to; below it they wrap as best they can.
const MIN_WIDTH: usize = 40;

pub fn render(summary: &Summary, gate: Option<&GateReport>, style: &Style) -> String {
    draw_report(&headline(summary), &sections(summary, gate), style)
}

/// A headline and sections as the terminal report (the comparison report draws its own).
pub fn draw_report(headline: &str, sections: &[Section], style: &Style) -> String {
    let mut out = String::new();
    push_text(
        &mut out,
        &format!("attempt-funnel — {}", terminal(headline)),
        style,
    );
    for section in sections {
        out.push('\n');
        let title = match (style.color, section.title_tone) {
            (true, Some(tone)) => tone.paint(&terminal(&section.title)),
            _ => terminal(&section.title).into_owned(),
        };
        out.push_str(&title);
        out.push('\n');
        if !section.headers.is_empty() {
            out.push_str(&draw(section, style));
            out.push('\n');
        }
        for note in &section.notes {
            push_text(&mut out, &terminal(note), style);
        }
    }
    if style.ascii {
        super::ascii(&out)
    } else {
        out
    }
}

/// A line of text, wrapped on a terminal.
fn push_text(out: &mut String, text: &str, style: &Style) {
    match style.width {
        Some(width) => {
            for line in wrap(text, width.max(MIN_WIDTH), 2) {
                out.push_str(&line);
                out.push('\n');
            }
        }
        None => {
            out.push_str(text);
            out.push('\n');
        }
    }
}

/// One section's table, fitted to the terminal when there is one.
fn draw(section: &Section, style: &Style) -> String {
    let Some(width) = style.width.map(|w| w.max(MIN_WIDTH)) else {
        return build(section, &section.headers, &[], style).to_string();
    };
    let mut dropped: Vec<usize> = Vec::new();
    for &next in &section.drop_order {
        let plain = Style {
            color: false,
            ..*style
        };
        let natural = build(section, &section.short_headers, &dropped, &plain).to_string();
        if natural.lines().all(|l| l.chars().count() <= width) {
            break;
        }
        dropped.push(next);
    }
    let mut table = build(section, &section.short_headers, &dropped, style);
    table
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(u16::try_from(width).unwrap_or(u16::MAX));
    table.to_string()
}

fn build(section: &Section, headers: &[String], dropped: &[usize], style: &Style) -> Table {
    let kept: Vec<usize> = (0..headers.len())
        .filter(|c| !dropped.contains(c))
        .collect();
    let mut table = Table::new();
    table.load_preset(if style.ascii {
        ASCII_FULL_CONDENSED
    } else {
        UTF8_FULL_CONDENSED
    });
    if style.color {
        table.enforce_styling();
    } else {
        table.force_no_tty();
    }
    table.set_header(kept.iter().map(|&c| terminal(&headers[c]).into_owned()));
    for row in &section.rows {
        table.add_row(kept.iter().map(|&c| {
            let cell = Cell::new(terminal(&row[c]));
            match tone_of(&row[c]) {
                Some(tone) if style.color && section.tone_column == Some(c) => {
                    cell.fg(colour(tone))
                }
                _ => cell,
            }
        }));
    }
    for (i, &c) in kept.iter().enumerate() {
        if let (true, Some(column)) = (section.numeric[c], table.column_mut(i)) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

fn colour(tone: Tone) -> Color {
    match tone {
        Tone::Good => Color::Green,
        Tone::Warning => Color::Yellow,
        Tone::Bad => Color::Red,
    }
}

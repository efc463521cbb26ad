//! Escaping of text that came from the input (operation and run IDs, targets, message IDs,
//! service names, file names, values quoted in bad-line messages) for each place it goes.
//! Input is untrusted: an ID may hold an ANSI escape sequence that recolours or retitles a
//! terminal, a newline that forges a `path:line:` message or breaks a Markdown table, a
//! character XML 1.0 forbids, or a leading `=` that a spreadsheet runs as a formula.
//!
//! | destination | function | what it does |
//! |---|---|---|
//! | terminal and stderr | [`terminal`] | control characters, and the Unicode ones that reorder or break lines, shown as visible escapes (`\x1b`, `\u{202e}`) |
//! | Markdown | [`markdown_text`], [`markdown_code`], [`markdown_row`] | as for the terminal, then markup characters, backslashes and pipes neutralised |
//! | JUnit XML | [`xml`] | as for the terminal (tab and newline kept), then `& < > " '` as entities |
//! | CSV | [`csv_cell`] | as for the terminal but for newlines (quoted cells hold them), then a cell that starts with `= + - @`, tab or CR prefixed with `'` (the OWASP rule against formula injection) |
//! | HTML | [`html`] | as for the terminal, then `& < > " '` as entities |
//!
//! JSON and JSON Lines need nothing more than JSON's own string escaping, and Parquet holds
//! data, not text to display: both keep the input's text as it was.
//!
//! Text is escaped where it is written, never where it is read: the analysis compares IDs
//! as the input spelled them. Backslashes are not doubled on the terminal, so the escaping
//! is idempotent (escaping twice changes nothing) and a Windows path stays readable.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a terminal raw: C0 and C1 control characters and DEL (they
/// move the cursor, recolour, retitle, or end a line), and the Unicode format characters
/// that reorder text or break lines (bidirectional overrides and isolates, line and
/// paragraph separators), which can make one ID read as another.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
}

/// `\x1b` for a character below U+0100, `\u{202e}` above.
fn push_visible(out: &mut String, c: char) {
    let n = c as u32;
    if n < 0x100 {
        let _ = write!(out, "\\x{n:02x}");
    } else {
        let _ = write!(out, "\\u{{{n:x}}}");
    }
}

/// `text` with every character that `keep` does not let through and [`is_unsafe`] flags
/// written as a visible escape; borrowed when nothing needed escaping (the usual case).
fn visible(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    // Printable ASCII (the usual ID) needs nothing: one pass over the bytes that the
    // compiler vectorises, instead of decoding and testing every character.
    let printable_ascii = text
        .bytes()
        .fold(true, |all, b| all & (0x20..0x7f).contains(&b));
    if printable_ascii || !text.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) && !keep(c) {
            push_visible(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// For a terminal or stderr, inside one line: every control character escaped, newline
/// and tab included, so that input text can neither act on the terminal nor start a line
/// of its own.
pub fn terminal(text: &str) -> Cow<'_, str> {
    visible(text, |_| false)
}

/// For a message of several lines of our own (an error with its context): as
/// [`terminal`], but newlines are kept. Input text inside such a message must have been
/// escaped with [`terminal`] where it was put in.
pub fn terminal_lines(text: &str) -> Cow<'_, str> {
    visible(text, |c| c == '\n')
}

/// For a Markdown text cell or line: as [`terminal`], then the characters Markdown would
/// read as emphasis, links, HTML or code are backslash-escaped (pipes are left to
/// [`markdown_row`]).
pub fn markdown_text(text: &str) -> String {
    let text = terminal(text);
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

/// A Markdown code span that holds `text` as it is, whatever backticks it contains, after
/// [`terminal`] (a code span cannot hold a line break either).
pub fn markdown_code(text: &str) -> String {
    if text.is_empty() || text == "–" {
        return text.to_string();
    }
    let text = terminal(text);
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// One Markdown table row of cells already escaped by [`markdown_text`] or
/// [`markdown_code`]. A pipe would end the cell, even inside code, so it is escaped: GFM
/// splits a row at every pipe not escaped by a backslash that is not itself escaped, so a
/// pipe gets one more backslash whenever those before it pair up. An empty cell is kept.
pub fn markdown_row(cells: &[String]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| {
            if c.is_empty() {
                return " ".to_string();
            }
            let mut out = String::with_capacity(c.len() + 2);
            let mut backslashes = 0;
            for ch in c.chars() {
                if ch == '|' && backslashes % 2 == 0 {
                    out.push('\\');
                }
                backslashes = if ch == '\\' { backslashes + 1 } else { 0 };
                out.push(ch);
            }
            out
        })
        .collect();
    format!("| {} |\n", cells.join(" | "))
}

/// For XML 1.0 text and attribute values: control characters XML 1.0 forbids (all below
/// U+0020 but tab, newline and carriage return) and the others [`is_unsafe`] flags
/// written as visible escapes (carriage return too: a CI log shows it badly), then the
/// five markup characters as entities.
pub fn xml(text: &str) -> String {
    entities(&visible(text, |c| c == '\n' || c == '\t'), true)
}

/// For HTML and SVG content and attribute values: as [`terminal`], then the five markup
/// characters as entities.
pub fn html(text: &str) -> String {
    entities(&terminal(text), false)
}

fn entities(text: &str, xml: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' if xml => out.push_str("&apos;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// The characters that make a spreadsheet read a cell as a formula (OWASP, "CSV
/// Injection"): a cell starting with one of them gets a leading `'`.
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// For a CSV text cell that a spreadsheet may open: as [`terminal`] but for newlines (a
/// quoted CSV cell holds them, and they stay data), and a cell that starts with a formula
/// character is prefixed with `'`, which spreadsheets show as text and hide. Quoting for
/// CSV itself is the CSV writer's business.
pub fn csv_cell(text: &str) -> Cow<'_, str> {
    let visible = visible(text, |c| c == '\n');
    if text.starts_with(FORMULA_STARTS) {
        Cow::Owned(format!("'{visible}"))
    } else {
        visible
    }
}

/// Whether a CSV text cell needs nothing done: [`csv_cell`] leaves it as it is, and CSV
/// need not quote it (not empty, printable ASCII without a comma or a quote, not starting
/// with a formula character). One pass over the bytes, for the rows' writer.
pub fn csv_plain(text: &str) -> bool {
    let plain = text.bytes().fold(true, |all, b| {
        all & (0x20..0x7f).contains(&b) & (b != b',') & (b != b'"')
    });
    plain
        && text
            .as_bytes()
            .first()
            .is_some_and(|&b| !FORMULA_STARTS.contains(&char::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible_escapes_on_the_terminal() {
        let cases = [
            ("op-1", "op-1"),
            ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
            ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
            ("a\nb.jsonl:3: forged", "a\\x0ab.jsonl:3: forged"),
            ("nul\0tab\tcr\r", "nul\\x00tab\\x09cr\\x0d"),
            ("del\x7f c1\u{9b}", "del\\x7f c1\\x9b"),
            ("rlo\u{202e}txt", "rlo\\u{202e}txt"),
            ("C:\\logs\\a.jsonl", "C:\\logs\\a.jsonl"),
            ("café ✓", "café ✓"),
        ];
        for (input, expected) in cases {
            assert_eq!(terminal(input), expected, "{input:?}");
            // Idempotent: escaping the escaped text changes nothing.
            assert_eq!(terminal(expected), expected);
        }
        assert_eq!(terminal_lines("a\x1b\nb"), "a\\x1b\nb");
        assert!(matches!(terminal("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn markdown_cells_keep_their_table_together() {
        assert_eq!(markdown_text("op_1 *x* <b>"), "op\\_1 \\*x\\* \\<b\\>");
        assert_eq!(markdown_text("a\r\nb"), "a\\\\x0d\\\\x0ab");
        assert_eq!(markdown_code("run-3/op-1"), "`run-3/op-1`");
        assert_eq!(markdown_code("a`b"), "``a`b``");
        assert_eq!(markdown_code("`x"), "`` `x ``");
        assert_eq!(markdown_code("a\nb"), "`a\\x0ab`");
        assert_eq!(markdown_row(&["a|b".into(), "".into()]), "| a\\|b |   |\n");
        // In code a backslash is not doubled: the pipe after it still gets its own.
        assert_eq!(markdown_row(&["`a\\\\|b`".into()]), "| `a\\\\\\|b` |\n");
        assert_eq!(markdown_row(&["`a\\|b`".into()]), "| `a\\|b` |\n");
    }

    #[test]
    fn xml_text_is_well_formed_whatever_the_input() {
        assert_eq!(
            xml("a<b & \"c\" 'd'"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;"
        );
        assert_eq!(xml("x\x01y\x1bz\tt\nn\r"), "x\\x01y\\x1bz\tt\nn\\x0d");
    }

    #[test]
    fn csv_cells_that_a_spreadsheet_would_run_are_prefixed() {
        for formula in ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"] {
            let cell = csv_cell(formula);
            assert!(cell.starts_with('\''), "{formula:?} → {cell}");
        }
        assert_eq!(csv_cell("=cmd\x1b"), "'=cmd\\x1b");
        assert_eq!(csv_cell("a\nb\r"), "a\nb\\x0d");
        assert_eq!(csv_cell("op-1"), "op-1");
        assert_eq!(csv_cell("a=b"), "a=b");
    }

    #[test]
    fn html_is_escaped_as_before_and_control_characters_made_visible() {
        assert_eq!(
            html("<a href='x'>&\x1b"),
            "&lt;a href=&#39;x&#39;&gt;&amp;\\x1b"
        );
    }
}

//! `show`: one operation in the terminal — its class and why, its funnel, its attempt tree
//! hop by hop (numbers, roles, outcomes, gaps), a text timeline scaled to
//! [`TIMELINE_COLUMNS`], its overlaps, bursts and findings. Formats an [`OperationView`];
//! computes nothing.

use super::layout::{count, counted, funnel_text, millis, tone_of, wrap};
use super::Style;
use crate::classify::{Class, Role};
use crate::escape::terminal;
use crate::summary::OperationView;
use crate::timeline::{OperationTimeline, TimelineAttempt, TimelineOverlap};

/// Width of the text timeline: fits beside a short label in a 100-column terminal.
pub const TIMELINE_COLUMNS: usize = 60;

/// The narrowest timeline drawn on a narrow terminal: below it, bars no longer tell
/// attempts apart.
const MIN_TIMELINE_COLUMNS: usize = 20;

/// What a class means for the operation, after "class X:".
pub fn class_reason(class: Class, first_hop: Option<&str>) -> String {
    let hop = first_hop.unwrap_or("–");
    match class {
        Class::Healthy if first_hop.is_none() => "no hop multiplied".to_string(),
        Class::Healthy => format!(
            "one retrying layer ({hop}) inside its budget, with no overlap and no burst"
        ),
        Class::NestedRetry => format!(
            "the first multiplying hop ({hop}) retried, and another layer retried too, so attempts multiplied"
        ),
        Class::FanOut => format!("the {hop} called several distinct targets: not a retry"),
        Class::Redelivery => format!("the queue at the {hop} delivered the same message again"),
        Class::Overlap => format!(
            "the {hop} retried while an earlier attempt of the operation was still running"
        ),
        Class::SynchronizedBurst => format!(
            "the {hop}'s retries fell in a cluster of aligned retries across many operations"
        ),
        Class::OverBudget => {
            format!("one retrying layer ({hop}), but a line has more attempts than its budget")
        }
    }
}

/// The input's clock as a date, when its milliseconds look like Unix epoch milliseconds
/// (between 1973 and 2286).
pub fn epoch_text(ms: f64) -> Option<String> {
    if !(1e11..1e13).contains(&ms) {
        return None;
    }
    let at = chrono::DateTime::from_timestamp_millis(ms.floor() as i64)?;
    Some(at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
}

/// `caller #2`
fn attempt_label(a: &TimelineAttempt) -> String {
    format!("{} #{}", a.hop, a.number)
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), millis)
}

fn gap_text(a: &TimelineAttempt) -> String {
    match (a.role, a.gap_ms) {
        (Role::Original, _) => String::new(),
        (_, Some(g)) if g >= 0.0 => format!("+{}", millis(g)),
        (_, Some(g)) => format!("−{}", millis(-g)),
        (_, None) => "–".to_string(),
    }
}

/// The tree prefix of each attempt in tree order: `├ `, `│ └ `, …
fn tree_prefixes(t: &OperationTimeline) -> Vec<String> {
    let depth = |pos: usize| t.attempts[t.tree_order[pos] as usize].depth as usize;
    let n = t.tree_order.len();
    // Whether a later sibling follows each position: one pass from the end, keeping per
    // depth whether a node at that depth came after the last shallower one.
    let mut later_sibling = vec![false; n];
    let mut seen: Vec<bool> = Vec::new();
    for pos in (0..n).rev() {
        let d = depth(pos);
        later_sibling[pos] = seen.get(d).copied().unwrap_or(false);
        seen.resize(d + 1, false);
        seen[d] = true;
    }
    let mut out = Vec::with_capacity(n);
    // On the current path, per depth: whether a later sibling still follows.
    let mut open: Vec<bool> = Vec::new();
    for (pos, &has_later_sibling) in later_sibling.iter().enumerate() {
        let d = depth(pos);
        open.truncate(d);
        let mut prefix = String::new();
        if d > 0 {
            for &more in open.iter().skip(1) {
                prefix.push_str(if more { "│ " } else { "  " });
            }
            prefix.push_str(if has_later_sibling { "├ " } else { "└ " });
        }
        open.push(has_later_sibling);
        out.push(prefix);
    }
    out
}

/// One attempt's bar: `=` while it ran, `#` while it overlapped another attempt of its
/// line, `>` at the end of one still in flight when the trace ended.
fn bar(t: &OperationTimeline, index: usize, w: usize, overlaps: &[&TimelineOverlap]) -> String {
    let a = &t.attempts[index];
    let span = if t.end_ms > 0.0 { t.end_ms } else { 1.0 };
    let col = |ms: f64| ((ms / span * w as f64).floor().max(0.0) as usize).min(w - 1);
    let first = col(a.start_ms);
    let last = if a.active_until_ms > a.start_ms {
        (((a.active_until_ms / span * w as f64).ceil() as usize).max(1) - 1).clamp(first, w - 1)
    } else {
        first
    };
    let mut cells = vec![' '; w];
    for (c, cell) in cells.iter_mut().enumerate().take(last + 1).skip(first) {
        let (lo, hi) = (c as f64 * span / w as f64, (c + 1) as f64 * span / w as f64);
        let overlapping = overlaps.iter().any(|o| o.start_ms < hi && o.end_ms > lo);
        *cell = if overlapping {
            '#'
        } else if a.untimed {
            '~'
        } else {
            '='
        };
    }
    if a.finish_ms.is_none() {
        cells[last] = '>';
    }
    cells.into_iter().collect()
}

/// Pads to `width` columns, counting characters (the tree glyphs are one column each).
fn pad(text: &str, width: usize) -> String {
    let n = text.chars().count();
    format!("{text}{}", " ".repeat(width.saturating_sub(n)))
}

fn pad_left(text: &str, width: usize) -> String {
    let n = text.chars().count();
    format!("{}{text}", " ".repeat(width.saturating_sub(n)))
}

/// `show`'s text; on a terminal (`style.width`) the timeline narrows and long lines wrap.
pub fn render(view: &OperationView, style: &Style) -> String {
    let text = render_text(view, style);
    let mut out = match style.width {
        Some(width) => text
            .lines()
            .flat_map(|line| {
                let indent = line.len() - line.trim_start().len();
                wrap(line, width, indent + 2)
            })
            .fold(String::new(), |mut out, line| {
                out.push_str(&line);
                out.push('\n');
                out
            }),
        None => text,
    };
    if style.ascii {
        out = super::ascii(&out);
    }
    if style.color {
        // The class on the first line.
        let class = view.record.class.name();
        if let Some(tone) = tone_of(class) {
            out = out.replacen(
                &format!(" — {class}\n"),
                &format!(" — {}\n", tone.paint(class)),
                1,
            );
        }
    }
    out
}

/// `view` with every string that came from the input (or from a hop name) escaped for the
/// terminal, so that the layout below can count columns and nothing in an ID acts.
fn escaped(view: &OperationView) -> OperationView {
    let mut v = view.clone();
    let esc = |s: &mut String| {
        if let std::borrow::Cow::Owned(e) = terminal(s) {
            *s = e;
        }
    };
    let r = &mut v.record;
    r.test_run_id.iter_mut().for_each(esc);
    esc(&mut r.operation_id);
    r.first_multiplying_hop.iter_mut().for_each(esc);
    r.findings.iter_mut().for_each(|f| esc(&mut f.hop));
    r.attempts.0.iter_mut().for_each(|(hop, _)| esc(hop));
    let t = &mut v.timeline;
    t.test_run_id.iter_mut().for_each(esc);
    esc(&mut t.operation_id);
    t.first_multiplying_hop.iter_mut().for_each(esc);
    t.rows.iter_mut().for_each(|row| esc(&mut row.hop));
    for a in &mut t.attempts {
        esc(&mut a.hop);
        a.target.iter_mut().for_each(esc);
        a.message_id.iter_mut().for_each(esc);
        a.line_key.iter_mut().for_each(esc);
        a.outcome.iter_mut().for_each(esc);
    }
    t.overlaps.iter_mut().for_each(|o| esc(&mut o.hop));
    t.bursts.iter_mut().for_each(|b| esc(&mut b.hop));
    v
}

fn render_text(view: &OperationView, style: &Style) -> String {
    let view = &escaped(view);
    let r = &view.record;
    let t = &view.timeline;
    let mut out = String::new();
    out.push_str(&format!("{} — {}\n", r.display_id(), r.class.name()));
    out.push_str(&format!(
        "  {}.\n\n",
        class_reason(r.class, r.first_multiplying_hop.as_deref())
    ));
    let rows: Vec<(&str, String)> = vec![
        (
            "first multiplying hop",
            r.first_multiplying_hop
                .clone()
                .unwrap_or_else(|| "none".into()),
        ),
        (
            "funnel",
            format!(
                "{} ({})",
                funnel_text(r),
                counted(r.total_attempts, "attempt", "attempts")
            ),
        ),
        (
            "time 0",
            format!(
                "{} ms on the input's clock{}",
                millis(t.start_ms),
                epoch_text(t.start_ms).map_or(String::new(), |d| format!(" ({d})"))
            ),
        ),
        ("duration", format!("{} ms", millis(t.end_ms))),
        ("overlap", format!("{} ms", millis(r.overlap_ms))),
    ];
    for (k, v) in rows {
        out.push_str(&format!("{} {v}\n", pad(k, 22)));
    }

    out.push_str(
        "\nAttempt tree (ms since time 0; gap: since the previous attempt of its line finished)\n",
    );
    let prefixes = tree_prefixes(t);
    let labels: Vec<String> = t
        .tree_order
        .iter()
        .zip(&prefixes)
        .map(|(&i, p)| format!("{p}{}", attempt_label(&t.attempts[i as usize])))
        .collect();
    let label_w = labels
        .iter()
        .map(|l| l.chars().count())
        .chain([7])
        .max()
        .unwrap_or(7);
    let header = [
        pad("attempt", label_w),
        pad("role", 10),
        pad_left("start", 8),
        pad_left("finish", 8),
        pad_left("took", 7),
        pad_left("gap", 8),
        String::new(),
        pad("outcome", 9),
        "line".to_string(),
    ]
    .join(" ");
    out.push_str(header.trim_end());
    out.push('\n');
    for (&i, label) in t.tree_order.iter().zip(&labels) {
        let a = &t.attempts[i as usize];
        let mut target = a.line_key.clone().unwrap_or_default();
        if a.orphan {
            target.push_str(" (orphan: no upstream parent)");
        }
        if a.start_inferred {
            target.push_str(" (start taken from upstream)");
        }
        if a.untimed {
            target.push_str(" (untimed: its request's times)");
        }
        let line = [
            pad(label, label_w),
            pad(a.role.name(), 10),
            pad_left(&millis(a.start_ms), 8),
            pad_left(&opt_ms(a.finish_ms), 8),
            pad_left(&opt_ms(a.duration_ms), 7),
            pad_left(&gap_text(a), 8),
            String::new(),
            pad(a.outcome.as_deref().unwrap_or("–"), 9),
            target,
        ]
        .join(" ");
        out.push_str(line.trim_end());
        out.push('\n');
    }

    out.push_str("\nTimeline\n");
    let short: Vec<String> = t
        .tree_order
        .iter()
        .map(|&i| attempt_label(&t.attempts[i as usize]))
        .collect();
    let short_w = short.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    // Label, space, two bars: the rest of a narrow terminal is the timeline.
    let columns = style.width.map_or(TIMELINE_COLUMNS, |w| {
        w.saturating_sub(short_w + 3)
            .clamp(MIN_TIMELINE_COLUMNS, TIMELINE_COLUMNS)
    });
    let left = "0 ms";
    let right = format!("{} ms", millis(t.end_ms));
    out.push_str(&format!(
        "{} {left}{}{right}\n",
        pad("", short_w),
        " ".repeat((columns + 2).saturating_sub(left.len() + right.chars().count()))
    ));
    // The overlaps of each attempt, gathered once.
    let mut overlaps_of: Vec<Vec<&TimelineOverlap>> = vec![Vec::new(); t.attempts.len()];
    for o in &t.overlaps {
        for &i in &o.attempts {
            overlaps_of[i as usize].push(o);
        }
    }
    for (&i, label) in t.tree_order.iter().zip(&short) {
        out.push_str(&format!(
            "{} |{}|\n",
            pad(label, short_w),
            bar(t, i as usize, columns, &overlaps_of[i as usize])
        ));
    }
    out.push_str(&format!(
        "{} = running   # overlapping another attempt of its line   > still in flight at the trace end{}\n",
        pad("", short_w),
        if t.has_untimed() {
            "   ~ untimed (its request's time)"
        } else {
            ""
        }
    ));

    if !t.overlaps.is_empty() {
        out.push_str("\nOverlaps\n");
        for o in &t.overlaps {
            let who: Vec<String> = o
                .attempts
                .iter()
                .map(|&i| {
                    let a = &t.attempts[i as usize];
                    format!("{} (from {} ms)", attempt_label(a), millis(a.start_ms))
                })
                .collect();
            out.push_str(&format!(
                "  {}: {}–{} ms ({} ms), {} active at once\n",
                o.hop,
                millis(o.start_ms),
                millis(o.end_ms),
                millis(o.end_ms - o.start_ms),
                who.join(" and ")
            ));
        }
    }
    if !t.bursts.is_empty() {
        out.push_str("\nSynchronized bursts\n");
        for b in &t.bursts {
            out.push_str(&format!(
                "  {}: retries of {} operations started within {} ms, at {} ms\n",
                b.hop,
                count(b.operations),
                millis(b.width_ms),
                millis(b.start_ms)
            ));
        }
    }
    out.push_str("\nFindings\n");
    if r.findings.is_empty() {
        out.push_str("  none\n");
    }
    let labels: Vec<String> = r.findings.iter().map(|f| f.to_string()).collect();
    let finding_w = labels.iter().map(|f| f.len()).max().unwrap_or(0);
    for (f, label) in r.findings.iter().zip(&labels) {
        out.push_str(format!("  {}  {}", pad(label, finding_w), f.explain()).trim_end());
        out.push('\n');
    }
    out
}

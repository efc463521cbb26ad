//! The HTML page for incident reviews: one self-contained file (inline CSS and SVG, no
//! script, no network — a Content-Security-Policy says so to the browser) that draws the
//! summary: headline, funnel per hop, class shares, attempts over time with bursts, an
//! attempt timeline per worst operation, and the shared layout's tables. Every chart is
//! drawn from aggregates ([`AttemptsOverTime`] has at most 200 buckets, timelines are
//! capped), so the page stays small for any input. It formats a [`Summary`]; the only
//! arithmetic here turns milliseconds and counts into pixels.

use super::layout::{
    count, counted, funnel_text, headline, millis, percent, sections, SectionKind,
};
use super::show::{class_reason, epoch_text};
use crate::classify::Class;
use crate::compare::{Comparison, Kind};
use crate::gate::GateReport;
use crate::summary::{OperationRecord, Summary};
use crate::timeline::{nice_step, AttemptsOverTime, OperationTimeline, OutcomeKind};

/// Width of every chart's coordinate system; the SVGs scale to the page.
const CHART_W: f64 = 1160.0;

/// Left column of the charts, for hop names.
const LABEL_W: f64 = 118.0;

/// Rows of the bursts table on the page; the JSON lists them all.
const BURSTS_LISTED: usize = 50;

/// Ticks wanted on a time axis (the step is rounded to 1, 2 or 5 × a power of ten).
const AXIS_TICKS: f64 = 8.0;

const STYLE: &str = r#"
:root { --ink:#1f2328; --muted:#59636e; --line:#d0d7de; --soft:#f6f8fa; --orig:#4c78a8;
  --retry:#e45756; --redel:#9c5fb5; --ops:#6e7781; --burst:#f58518; --hl:#fff2b3; }
* { box-sizing: border-box; }
html { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--ink); background: #fff; margin: 0 auto; max-width: 1240px; padding: 24px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 6px; }
p { margin: 6px 0; }
.lede { font-size: 17px; margin: 6px 0 2px; }
.muted, .meta { color: var(--muted); }
.meta { font-size: 13px; }
.cards { display: grid; grid-template-columns: repeat(6, 1fr); gap: 10px; margin: 16px 0 4px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; background: var(--soft); }
.card b { display: block; font-size: 21px; font-variant-numeric: tabular-nums; }
.card span { color: var(--muted); font-size: 12px; }
.card.alert { border-color: var(--retry); background: #fdf0ef; }
svg.chart { display: block; width: 100%; height: auto; margin: 4px 0; }
svg.chart text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; font-size: 12px; fill: var(--ink); }
svg.chart text.small { font-size: 11px; fill: var(--muted); }
svg.chart text.bold { font-weight: 600; }
svg.chart text.in { fill: #fff; font-size: 10px; }
svg.chart .grid { stroke: #eaeef2; stroke-width: 1; }
svg.chart .axis { stroke: var(--line); stroke-width: 1; }
svg.chart .hit { fill: transparent; }
svg.chart .hit:hover { fill: rgba(31,35,40,.06); }
.f-orig { fill: var(--orig); } .f-retry { fill: var(--retry); } .f-redel { fill: var(--redel); }
.f-ops { fill: #c9d1d9; } .l-ops { fill: none; stroke: var(--ops); stroke-width: 1.2; stroke-dasharray: 3 2; }
.f-burst { fill: var(--burst); fill-opacity: .16; } .m-burst { fill: var(--burst); }
.f-overlap { fill: var(--retry); fill-opacity: .16; stroke: var(--retry); stroke-opacity: .5; stroke-dasharray: 2 2; }
.f-hl { fill: var(--hl); } .f-row { fill: var(--soft); }
.k-ok { fill: #3f9b4f; background: #3f9b4f; } .k-error { fill: #d1242f; background: #d1242f; }
.k-timeout { fill: #e8871e; background: #e8871e; } .k-rejected { fill: #b4488f; background: #b4488f; }
.k-cancelled { fill: #8c959f; background: #8c959f; } .k-unknown { fill: #afb8c1; background: #afb8c1; }
.unfinished { fill-opacity: .45; stroke: var(--ink); stroke-dasharray: 3 2; stroke-width: 1; }
.untimed { fill-opacity: .3; stroke: var(--ink); stroke-dasharray: 1 2; stroke-width: 1; }
.link { stroke: #8c959f; stroke-width: 1; stroke-opacity: .55; }
.c-healthy { fill: #3f9b4f; background: #3f9b4f; } .c-nested-retry { fill: #d1242f; background: #d1242f; }
.c-fan-out { fill: #4c78a8; background: #4c78a8; } .c-redelivery { fill: #9c5fb5; background: #9c5fb5; }
.c-overlap { fill: #e8871e; background: #e8871e; } .c-synchronized-burst { fill: #c9a227; background: #c9a227; }
.c-over-budget { fill: #8a5a44; background: #8a5a44; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 12px; color: var(--muted); margin: 4px 0 8px; padding: 0; list-style: none; }
.sw { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -2px; margin-right: 5px; }
.sw.line { height: 0; border-top: 2px dashed var(--ops); border-radius: 0; vertical-align: 3px; }
.sw.hatch { background: rgba(228,87,86,.18); border: 1px dashed rgba(228,87,86,.7); }
.sw.hl { background: var(--hl); border: 1px solid #e3c84a; }
.sw.unf { background: rgba(175,184,193,.45); border: 1px dashed var(--ink); }
.sw.unt { background: rgba(175,184,193,.3); border: 1px dotted var(--ink); }
.classes { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 2px 24px; margin: 8px 0; padding: 0; list-style: none; font-size: 13px; }
.classes li.zero { color: var(--muted); }
.classes b { font-variant-numeric: tabular-nums; }
.tag { display: inline-block; color: #fff; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600; }
figure.op { margin: 18px 0 26px; break-inside: avoid; }
figure.op figcaption { margin-bottom: 4px; }
figure.op figcaption .why { color: var(--muted); font-size: 13px; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
a { color: #0969da; }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; }
@page { margin: 12mm; }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  h2 { break-after: avoid; margin-top: 18px; }
  section.chart-section, figure, table, .cards { break-inside: avoid; }
  .cards { grid-template-columns: repeat(6, 1fr); }
  a { color: inherit; text-decoration: none; }
  svg.chart .hit:hover { fill: transparent; }
  svg.chart text { font-size: 14px; }
  svg.chart text.small, svg.chart text.in { font-size: 12px; }
}
"#;

/// Escapes text for HTML and SVG content and attributes (see [`crate::escape::html`]).
fn esc(text: &str) -> String {
    crate::escape::html(text)
}

/// A pixel coordinate, short: `12.5`, `40`.
fn px(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// A time offset for an axis whose ticks are `step` ms apart, in the one unit that suits
/// the step: `250 ms`, `1.5 s`, `2 min`, `3 h`, `2 d`.
fn offset_text(ms: f64, step: f64) -> String {
    let (unit_ms, unit) = [
        (86_400_000.0, "d"),
        (3_600_000.0, "h"),
        (60_000.0, "min"),
        (1000.0, "s"),
    ]
    .into_iter()
    .find(|&(u, _)| step >= u / 10.0 && (u < 60_000.0 || step >= u))
    .unwrap_or((1.0, "ms"));
    let text = format!("{:.3}", ms / unit_ms);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} {unit}")
}

/// Tick labels are centred on their tick, except where that would cut them at the
/// chart's right edge.
fn tick_anchor(x: f64) -> &'static str {
    if x > CHART_W - 40.0 {
        "end"
    } else {
        "middle"
    }
}

fn class_css(class: Class) -> String {
    format!("c-{}", class.name())
}

fn kind_css(kind: OutcomeKind) -> String {
    format!("k-{}", kind.name())
}

pub fn render(s: &Summary, gate: Option<&GateReport>) -> String {
    let mut out = String::with_capacity(64 * 1024);
    out.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n");
    out.push_str(&format!(
        "<title>attempt-funnel report — {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(&s.input.files.join(", "))
    ));
    header(&mut out, s);
    funnel(&mut out, s);
    classes(&mut out, s);
    over_time(&mut out, s);
    timelines(&mut out, s);
    tables(&mut out, s, gate);
    out.push_str(&format!(
        "<footer>Made by attempt-funnel {} (summary schema {}) from {}. This page is self-contained: it loads nothing and runs no script. Every number on it is in <code>--format json</code>.</footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        s.schema_version,
        esc(&s.input.files.join(", "))
    ));
    out
}

fn header(out: &mut String, s: &Summary) {
    out.push_str("<header>\n<h1>Retry storm report</h1>\n");
    out.push_str(&format!("<p class=\"lede\">{}</p>\n", esc(&headline(s))));
    let mut meta = format!(
        "Input: {} — {}, {}",
        esc(&s.input.files.join(", ")),
        counted(s.input.lines, "line", "lines"),
        counted(s.input.events, "event", "events")
    );
    if s.input.bad_lines > 0 {
        meta.push_str(&format!(
            ", <b>{} left out</b>",
            counted(s.input.bad_lines, "bad line", "bad lines")
        ));
    }
    if let Some(t) = &s.attempts_over_time {
        let span = t.bucket_ms * t.buckets as f64;
        meta.push_str(&format!(
            ". Attempts start from {} ms{} over about {}.",
            millis(t.start_ms),
            epoch_text(t.start_ms).map_or(String::new(), |d| format!(" ({d})")),
            offset_text(span, nice_step(span / AXIS_TICKS))
        ));
    }
    out.push_str(&format!("<p class=\"meta\">{meta}</p>\n"));

    let peak = s
        .hops
        .iter()
        .filter(|h| h.attempts > 0)
        .max_by(|a, b| a.amplification.total_cmp(&b.amplification));
    let healthy = s.classes.first().map_or(0.0, |c| c.share);
    let cards: Vec<(String, String, bool)> = vec![
        (count(s.operations), "logical operations".into(), false),
        (
            count(s.attempts),
            format!(
                "attempts; {} of them retries ({})",
                count(s.retry_attempts),
                percent(s.retry_share)
            ),
            s.retry_share > 0.2,
        ),
        (
            peak.map_or("–".into(), |h| format!("{:.2}×", h.amplification)),
            peak.map_or("peak amplification".into(), |h| {
                format!("peak amplification, at the {}", h.hop)
            }),
            peak.is_some_and(|h| h.amplification >= 2.0),
        ),
        (
            s.main_multiplying_hop
                .clone()
                .unwrap_or_else(|| "none".into()),
            "hop where most operations first multiplied".into(),
            s.main_multiplying_hop.is_some(),
        ),
        (
            percent(healthy),
            format!(
                "healthy; {} operations are not",
                count(s.operations - s.classes.first().map_or(0, |c| c.operations))
            ),
            healthy < 0.9,
        ),
        (
            count(s.bursts.count),
            format!(
                "synchronized bursts, {} operations; overlap in {}",
                count(s.bursts.operations),
                count(s.overlap.operations)
            ),
            s.bursts.count > 0,
        ),
    ];
    out.push_str("<div class=\"cards\">\n");
    for (value, label, alert) in cards {
        out.push_str(&format!(
            "<div class=\"card{}\"><b>{}</b><span>{}</span></div>\n",
            if alert { " alert" } else { "" },
            esc(&value),
            esc(&label)
        ));
    }
    out.push_str("</div>\n</header>\n");
}

fn funnel(out: &mut String, s: &Summary) {
    out.push_str("<section class=\"chart-section\" id=\"funnel\">\n<h2>Funnel per hop</h2>\n");
    out.push_str("<p class=\"muted\">Attempts at each hop against the logical operations (the dashed line: one attempt per operation). Amplification = attempts ÷ operations.</p>\n");
    let hops: Vec<_> = s.hops.iter().filter(|h| h.attempts > 0).collect();
    let row_h = 40.0;
    let bar_h = 22.0;
    let top = 8.0;
    let height = top + row_h * (hops.len() + 1) as f64 + 6.0;
    let x0 = LABEL_W + 6.0;
    let bar_w = 640.0;
    let max = hops
        .iter()
        .map(|h| h.attempts)
        .chain([s.operations])
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x = |n: u64| x0 + n as f64 / max * bar_w;
    out.push_str(&format!(
        "<svg id=\"funnel-chart\" class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Attempts per hop against logical operations\">\n",
        px(CHART_W),
        px(height)
    ));
    // Operations row.
    let y = top;
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"bold\">operations</text>\n",
        px(LABEL_W - 4.0),
        px(y + bar_h / 2.0 + 4.0)
    ));
    out.push_str(&format!(
        "<rect class=\"f-ops\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{} logical operations</title></rect>\n",
        px(x0),
        px(y),
        px(x(s.operations) - x0),
        px(bar_h),
        count(s.operations)
    ));
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\">{} logical operations</text>\n",
        px(x(s.operations).max(x0) + 8.0),
        px(y + bar_h / 2.0 + 4.0),
        count(s.operations)
    ));
    for (i, h) in hops.iter().enumerate() {
        let y = top + row_h * (i + 1) as f64;
        let main = s.main_multiplying_hop.as_deref() == Some(h.hop.as_str());
        if main {
            out.push_str(&format!(
                "<rect class=\"f-hl\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\"/>\n",
                px(y - 6.0),
                px(CHART_W),
                px(row_h - 2.0)
            ));
        }
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"bold\">{}</text>\n",
            px(LABEL_W - 4.0),
            px(y + bar_h / 2.0 + 4.0),
            esc(&h.hop)
        ));
        hop_bar(out, h, &x, y, bar_h, "", "");
        let mut text = format!(
            "<tspan class=\"bold\">{:.2}×</tspan> · {} attempts",
            h.amplification,
            count(h.attempts)
        );
        if h.retries > 0 {
            text.push_str(&format!(", {} retries", count(h.retries)));
        }
        if h.redeliveries > 0 {
            text.push_str(&format!(", {} redeliveries", count(h.redeliveries)));
        }
        if h.first_multiplying > 0 {
            text.push_str(&format!(
                " · <tspan{}>first to multiply in {}</tspan>",
                if main { " class=\"bold\"" } else { "" },
                counted(h.first_multiplying, "operation", "operations")
            ));
        }
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\">{text}</text>\n",
            px(x(h.attempts) + 8.0),
            px(y + bar_h / 2.0 + 4.0)
        ));
    }
    out.push_str(&format!(
        "<line class=\"l-ops\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>\n",
        px(x(s.operations)),
        px(top),
        px(height - 4.0)
    ));
    out.push_str("</svg>\n");
    out.push_str("<ul class=\"legend\"><li><span class=\"sw f-ops\" style=\"background:#c9d1d9\"></span>logical operations</li><li><span class=\"sw\" style=\"background:var(--orig)\"></span>originals</li><li><span class=\"sw\" style=\"background:var(--retry)\"></span>retries</li><li><span class=\"sw\" style=\"background:var(--redel)\"></span>redeliveries</li><li><span class=\"sw line\"></span>one attempt per operation</li><li><span class=\"sw hl\"></span>the hop where most operations first multiplied</li></ul>\n");
    out.push_str("</section>\n");
}

/// One hop's bar: originals, retries and redeliveries side by side from the axis. `attrs`
/// are added to each rectangle, `title` prefixes each tooltip.
fn hop_bar(
    out: &mut String,
    h: &crate::summary::HopSummary,
    x: &dyn Fn(u64) -> f64,
    y: f64,
    bar_h: f64,
    attrs: &str,
    title: &str,
) {
    let parts = [
        (h.originals, "f-orig", "originals"),
        (h.retries, "f-retry", "retries"),
        (h.redeliveries, "f-redel", "redeliveries"),
    ];
    let mut left = 0u64;
    for (n, css, what) in parts {
        if n == 0 {
            continue;
        }
        out.push_str(&format!(
            "<rect class=\"{css}\"{attrs} x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{title}{}: {} {what}</title></rect>\n",
            px(x(left)),
            px(y),
            px((x(left + n) - x(left)).max(1.0)),
            px(bar_h),
            esc(&h.hop),
            count(n)
        ));
        left += n;
    }
}

fn classes(out: &mut String, s: &Summary) {
    out.push_str("<section class=\"chart-section\" id=\"classes\">\n<h2>Classes</h2>\n");
    let (x0, w, h) = (0.0, CHART_W, 30.0);
    out.push_str(&format!(
        "<svg id=\"class-chart\" class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Share of operations per class\">\n",
        px(CHART_W),
        px(h)
    ));
    let mut left = 0.0;
    for c in s.classes.iter().filter(|c| c.operations > 0) {
        let width = c.share * w;
        out.push_str(&format!(
            "<rect class=\"{}\" x=\"{}\" y=\"0\" width=\"{}\" height=\"{}\"><title>{}: {} operations ({})</title></rect>\n",
            class_css(c.class),
            px(x0 + left),
            px(width),
            px(h),
            c.class.name(),
            count(c.operations),
            percent(c.share)
        ));
        let label = format!("{} {}", c.class.name(), percent(c.share));
        let short = percent(c.share);
        let text = if width > label.len() as f64 * 6.6 + 8.0 {
            Some(label)
        } else if width > short.len() as f64 * 6.6 + 6.0 {
            Some(short)
        } else {
            None
        };
        if let Some(text) = text {
            out.push_str(&format!(
                "<text class=\"in\" style=\"font-size:12px\" x=\"{}\" y=\"{}\">{}</text>\n",
                px(x0 + left + 5.0),
                px(h / 2.0 + 4.0),
                esc(&text)
            ));
        }
        left += width;
    }
    out.push_str("</svg>\n<ul class=\"classes\">\n");
    for c in &s.classes {
        out.push_str(&format!(
            "<li{}><span class=\"sw {}\"></span><b>{}</b> {} ({})</li>\n",
            if c.operations == 0 {
                " class=\"zero\""
            } else {
                ""
            },
            class_css(c.class),
            c.class.name(),
            count(c.operations),
            percent(c.share)
        ));
    }
    out.push_str("</ul>\n</section>\n");
}

/// The step path of the area between `lower` and `upper` (per bucket), as SVG path data.
fn step_area(
    lower: &[u64],
    upper: &[u64],
    x: &dyn Fn(usize) -> f64,
    y: &dyn Fn(u64) -> f64,
) -> String {
    let mut d = step_line(upper, x, y);
    for (i, &v) in lower.iter().enumerate().rev() {
        d.push_str(&format!("V{}H{}", px(y(v)), px(x(i))));
    }
    d.push('Z');
    d
}

/// The step line through `values`, as SVG path data.
fn step_line(values: &[u64], x: &dyn Fn(usize) -> f64, y: &dyn Fn(u64) -> f64) -> String {
    let mut d = format!("M{} {}", px(x(0)), px(y(values[0])));
    for (i, &v) in values.iter().enumerate() {
        if i > 0 {
            d.push_str(&format!("V{}", px(y(v))));
        }
        d.push_str(&format!("H{}", px(x(i + 1))));
    }
    d
}

fn over_time(out: &mut String, s: &Summary) {
    let Some(t) = &s.attempts_over_time else {
        return;
    };
    out.push_str(
        "<section class=\"chart-section\" id=\"over-time\">\n<h2>Attempts over time</h2>\n",
    );
    out.push_str(&format!(
        "<p class=\"muted\">Attempts started per {}, one panel per hop on one time axis, with the logical operations started for reference. Synchronized bursts are marked <span class=\"sw\" style=\"background:var(--burst)\"></span>on their hop. Hover a column for its numbers.</p>\n",
        if t.bucket_ms < 1000.0 {
            format!("{} ms", millis(t.bucket_ms))
        } else {
            offset_text(t.bucket_ms, t.bucket_ms)
        }
    ));
    draw_over_time(out, s, t);
    out.push_str("<ul class=\"legend\"><li><span class=\"sw\" style=\"background:#c9d1d9\"></span>operations started</li><li><span class=\"sw line\"></span>operations started (reference)</li><li><span class=\"sw\" style=\"background:var(--orig)\"></span>originals</li><li><span class=\"sw\" style=\"background:var(--retry)\"></span>retries</li><li><span class=\"sw\" style=\"background:var(--redel)\"></span>redeliveries</li><li><span class=\"sw\" style=\"background:var(--burst)\"></span>synchronized burst</li></ul>\n");
    out.push_str("</section>\n");
}

fn draw_over_time(out: &mut String, s: &Summary, t: &AttemptsOverTime) {
    let panel_h = 64.0;
    let gap = 16.0;
    let top = 14.0;
    let axis_h = 26.0;
    let x0 = LABEL_W + 6.0;
    let plot_w = CHART_W - x0 - 14.0;
    let panels = t.hops.len() + 1;
    let height = top + panels as f64 * (panel_h + gap) + axis_h;
    let span_ms = t.bucket_ms * t.buckets as f64;
    let x = |i: usize| x0 + i as f64 / t.buckets as f64 * plot_w;
    let x_ms = |ms: f64| x0 + ((ms - t.start_ms) / span_ms).clamp(0.0, 1.0) * plot_w;
    let peak = t.peak.max(1) as f64;
    out.push_str(&format!(
        "<svg id=\"attempts-over-time\" class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Attempts started over time per hop, with bursts\">\n",
        px(CHART_W),
        px(height)
    ));
    // Time grid and axis.
    let step = nice_step(span_ms / AXIS_TICKS);
    let axis_y = height - axis_h + 4.0;
    let mut tick = 0.0;
    while tick <= span_ms + 1e-9 {
        let tx = x_ms(t.start_ms + tick);
        out.push_str(&format!(
            "<line class=\"grid\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/><text class=\"small\" x=\"{0}\" y=\"{3}\" text-anchor=\"{5}\">{4}</text>\n",
            px(tx),
            px(top - 6.0),
            px(axis_y),
            px(axis_y + 14.0),
            if tick == 0.0 { "0".to_string() } else { format!("+{}", offset_text(tick, step)) },
            tick_anchor(tx)
        ));
        tick += step;
    }
    let zeros = vec![0u64; t.buckets];
    for p in 0..panels {
        let ptop = top + p as f64 * (panel_h + gap);
        let base = ptop + panel_h;
        let y = |v: u64| base - v as f64 / peak * panel_h;
        let (name, note) = if p == 0 {
            ("operations".to_string(), "started".to_string())
        } else {
            let h = &t.hops[p - 1];
            let max = (0..t.buckets)
                .map(|i| h.originals[i] + h.retries[i] + h.redeliveries[i])
                .max()
                .unwrap_or(0);
            (h.hop.clone(), format!("up to {}/bucket", count(max)))
        };
        out.push_str(&format!(
            "<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\" class=\"bold\">{2}</text><text x=\"{0}\" y=\"{3}\" text-anchor=\"end\" class=\"small\">{4}</text>\n",
            px(LABEL_W - 4.0),
            px(ptop + panel_h / 2.0),
            esc(&name),
            px(ptop + panel_h / 2.0 + 14.0),
            esc(&note)
        ));
        out.push_str(&format!(
            "<line class=\"axis\" x1=\"{}\" x2=\"{}\" y1=\"{2}\" y2=\"{2}\"/>\n",
            px(x0),
            px(x0 + plot_w),
            px(base)
        ));
        if p == 0 {
            out.push_str(&format!(
                "<path class=\"f-ops series-operations\" d=\"{}\"/>\n",
                step_area(&zeros, &t.operations_started, &x, &y)
            ));
            continue;
        }
        let h = &t.hops[p - 1];
        for b in s.bursts.list.iter().filter(|b| b.hop == h.hop) {
            let bx = x_ms(b.start_ms);
            let bw = (x_ms(b.start_ms + b.width_ms) - bx).max(3.0);
            out.push_str(&format!(
                "<g class=\"burst-marker\"><rect class=\"f-burst\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/><path class=\"m-burst\" d=\"M{} {}l-4 -7h8z\"/><title>synchronized burst at the {}: {} retries of {} operations within {} ms, at +{} ms</title></g>\n",
                px(bx - if bw == 3.0 { 1.5 } else { 0.0 }),
                px(ptop - 2.0),
                px(bw),
                px(panel_h + 2.0),
                px(bx + bw / 2.0 - if bw == 3.0 { 1.5 } else { 0.0 }),
                px(ptop - 1.0),
                esc(&b.hop),
                count(b.retries),
                count(b.operations),
                millis(b.width_ms),
                millis(b.start_ms - t.start_ms)
            ));
        }
        let stacked_r: Vec<u64> = (0..t.buckets)
            .map(|i| h.originals[i] + h.retries[i])
            .collect();
        let stacked_d: Vec<u64> = (0..t.buckets)
            .map(|i| stacked_r[i] + h.redeliveries[i])
            .collect();
        out.push_str(&format!(
            "<path class=\"f-orig series-originals\" d=\"{}\"/>\n",
            step_area(&zeros, &h.originals, &x, &y)
        ));
        if h.retries.iter().any(|&n| n > 0) {
            out.push_str(&format!(
                "<path class=\"f-retry series-retries\" d=\"{}\"/>\n",
                step_area(&h.originals, &stacked_r, &x, &y)
            ));
        }
        if h.redeliveries.iter().any(|&n| n > 0) {
            out.push_str(&format!(
                "<path class=\"f-redel series-redeliveries\" d=\"{}\"/>\n",
                step_area(&stacked_r, &stacked_d, &x, &y)
            ));
        }
        out.push_str(&format!(
            "<path class=\"l-ops\" d=\"{}\"/>\n",
            step_line(&t.operations_started, &x, &y)
        ));
    }
    // One hover target per bucket, with every series' number.
    out.push_str("<g class=\"hits\">");
    for i in 0..t.buckets {
        let from = i as f64 * t.bucket_ms;
        let mut title = format!(
            "+{}–{} ms: {} operations started",
            millis(from),
            millis(from + t.bucket_ms),
            count(t.operations_started[i])
        );
        for h in &t.hops {
            title.push_str(&format!(
                "; {} {} + {} retries",
                h.hop,
                count(h.originals[i]),
                count(h.retries[i])
            ));
            if h.redeliveries[i] > 0 {
                title.push_str(&format!(" + {} redeliveries", count(h.redeliveries[i])));
            }
        }
        out.push_str(&format!(
            "<rect class=\"hit\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
            px(x(i)),
            px(top - 6.0),
            px(x(i + 1) - x(i)),
            px(axis_y - top + 6.0),
            esc(&title)
        ));
    }
    out.push_str("</g>\n</svg>\n");
}

fn timelines(out: &mut String, s: &Summary) {
    if s.timelines.is_empty() {
        return;
    }
    out.push_str("<section id=\"timelines\">\n<h2>Worst operations: attempt timelines</h2>\n");
    out.push_str("<p class=\"muted\">One row per hop, one bar per attempt (hover for details), coloured by outcome; thin lines link an attempt to the upstream attempt that caused it. Time 0 is the operation's first start.</p>\n");
    out.push_str("<ul class=\"legend\">");
    for kind in OutcomeKind::ALL {
        out.push_str(&format!(
            "<li><span class=\"sw {0}\"></span>{1}</li>",
            kind_css(kind),
            kind.name()
        ));
    }
    out.push_str("<li><span class=\"sw unf\"></span>still in flight at the trace end</li>");
    // Only reports with such attempts (a gateway's log of attempt counts) explain them.
    if s.timelines.iter().any(OperationTimeline::has_untimed) {
        out.push_str(
            "<li><span class=\"sw unt\"></span>untimed: drawn over its request's time</li>",
        );
    }
    out.push_str("<li><span class=\"sw hatch\"></span>overlap</li><li><span class=\"sw hl\"></span>first multiplying hop</li><li><span class=\"sw\" style=\"background:var(--burst)\"></span>synchronized burst</li></ul>\n");
    for (n, t) in s.timelines.iter().enumerate() {
        let record = s
            .worst_operations
            .iter()
            .find(|r| r.operation_id == t.operation_id && r.test_run_id == t.test_run_id);
        timeline(out, n, t, record);
    }
    out.push_str("</section>\n");
}

fn timeline(out: &mut String, n: usize, t: &OperationTimeline, record: Option<&OperationRecord>) {
    let id = match &t.test_run_id {
        Some(run) => format!("{run}/{}", t.operation_id),
        None => t.operation_id.clone(),
    };
    out.push_str(&format!(
        "<figure class=\"op\" id=\"op-{n}\">\n<figcaption>"
    ));
    out.push_str(&format!("<b>{}</b> ", esc(&id)));
    if let Some(r) = record {
        out.push_str(&format!(
            "<span class=\"tag {}\">{}</span> · {} · {} over {} ms{}",
            class_css(r.class),
            r.class.name(),
            esc(&funnel_text(r)),
            counted(r.total_attempts, "attempt", "attempts"),
            millis(t.end_ms),
            if r.overlap_ms > 0.0 {
                format!(" · overlap {} ms", millis(r.overlap_ms))
            } else {
                String::new()
            }
        ));
        out.push_str(&format!(
            "<br><span class=\"why\">{}.",
            esc(&class_reason(r.class, r.first_multiplying_hop.as_deref()))
        ));
        if !r.findings.is_empty() {
            let findings: Vec<String> = r
                .findings
                .iter()
                .map(|f| {
                    format!(
                        "<abbr title=\"{}\">{}</abbr>",
                        esc(&f.explain()),
                        esc(&f.to_string())
                    )
                })
                .collect();
            out.push_str(&format!(" Findings: {}.", findings.join(", ")));
        }
        out.push_str("</span>");
    }
    out.push_str("</figcaption>\n");

    let lane_h = 16.0;
    let bar_h = 12.0;
    let row_pad = 6.0;
    let top = 22.0;
    let x0 = LABEL_W + 6.0;
    let plot_w = CHART_W - x0 - 14.0;
    let span = if t.end_ms > 0.0 { t.end_ms } else { 1.0 };
    let x = |ms: f64| x0 + (ms / span).clamp(0.0, 1.0) * plot_w;
    let mut row_top = Vec::with_capacity(t.rows.len());
    let mut y = top;
    for row in &t.rows {
        row_top.push(y);
        y += row.lanes as f64 * lane_h + 2.0 * row_pad;
    }
    let height = y + 4.0;
    out.push_str(&format!(
        "<svg class=\"chart op-timeline\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Attempt timeline of {}\">\n",
        px(CHART_W),
        px(height),
        esc(&id)
    ));
    // Rows.
    for (r, row) in t.rows.iter().enumerate() {
        let ry = row_top[r];
        let rh = row.lanes as f64 * lane_h + 2.0 * row_pad;
        let css = if row.first_multiplying {
            "f-hl first-multiplying"
        } else if r % 2 == 0 {
            "f-row"
        } else {
            ""
        };
        if !css.is_empty() {
            out.push_str(&format!(
                "<rect class=\"{css}\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n",
                px(ry),
                px(CHART_W),
                px(rh)
            ));
        }
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"bold\">{}</text>\n",
            px(LABEL_W - 4.0),
            px(ry + rh / 2.0 + (if row.first_multiplying { -1.0 } else { 4.0 })),
            esc(&row.hop)
        ));
        if row.first_multiplying {
            out.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"small\">first to multiply</text>\n",
                px(LABEL_W - 4.0),
                px(ry + rh / 2.0 + 11.0)
            ));
        }
    }
    let row_of = |hop: &str| t.rows.iter().position(|r| r.hop == hop).unwrap_or(0);
    // Axis.
    let step = nice_step(span / AXIS_TICKS);
    let mut tick = 0.0;
    while tick <= span + 1e-9 {
        out.push_str(&format!(
            "<line class=\"grid\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/><text class=\"small\" x=\"{0}\" y=\"{3}\" text-anchor=\"{5}\">{4}</text>\n",
            px(x(tick)),
            px(top - 4.0),
            px(height - 4.0),
            px(top - 8.0),
            offset_text(tick, step),
            tick_anchor(x(tick))
        ));
        tick += step;
    }
    // Overlaps behind the bars.
    for o in &t.overlaps {
        let r = row_of(&o.hop);
        out.push_str(&format!(
            "<rect class=\"f-overlap overlap\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>overlap at the {}: {}–{} ms ({} ms)</title></rect>\n",
            px(x(o.start_ms)),
            px(row_top[r] + 2.0),
            px((x(o.end_ms) - x(o.start_ms)).max(1.0)),
            px(t.rows[r].lanes as f64 * lane_h + 2.0 * row_pad - 4.0),
            esc(&o.hop),
            millis(o.start_ms),
            millis(o.end_ms),
            millis(o.end_ms - o.start_ms)
        ));
    }
    for b in &t.bursts {
        let r = row_of(&b.hop);
        out.push_str(&format!(
            "<rect class=\"m-burst burst-marker\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>synchronized burst at the {}: retries of {} operations within {} ms</title></rect>\n",
            px(x(b.start_ms) - 1.0),
            px(row_top[r]),
            px((x(b.start_ms + b.width_ms) - x(b.start_ms)).max(2.0)),
            px(t.rows[r].lanes as f64 * lane_h + 2.0 * row_pad),
            esc(&b.hop),
            count(b.operations),
            millis(b.width_ms)
        ));
    }
    let bar_y = |i: usize| {
        let a = &t.attempts[i];
        row_top[row_of(&a.hop)] + row_pad + a.lane as f64 * lane_h + (lane_h - bar_h) / 2.0
    };
    // Links to the parent attempt, then the bars on top.
    for (i, a) in t.attempts.iter().enumerate() {
        if let Some(p) = a.parent {
            let lx = x(a.start_ms);
            out.push_str(&format!(
                "<line class=\"link\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>\n",
                px(lx),
                px(bar_y(p as usize) + bar_h / 2.0),
                px(bar_y(i))
            ));
        }
    }
    for (i, a) in t.attempts.iter().enumerate() {
        let bx = x(a.start_ms);
        let bw = (x(a.active_until_ms) - bx).max(2.0);
        let by = bar_y(i);
        let role = a.role.name();
        let mut title = format!(
            "{} #{} ({role}): {}–{} ms",
            a.hop,
            a.number,
            millis(a.start_ms),
            a.finish_ms.map_or("still in flight".to_string(), millis)
        );
        if let Some(d) = a.duration_ms {
            title.push_str(&format!(" ({} ms)", millis(d)));
        }
        if a.untimed {
            title.push_str(" (its request's times: the attempt's own were not logged)");
        }
        title.push_str(&format!(
            ", outcome {}",
            a.outcome.as_deref().unwrap_or("not logged")
        ));
        if let Some(g) = a.gap_ms {
            title.push_str(&format!(
                ", {} ms after the previous attempt of its line",
                millis(g)
            ));
        }
        if let Some(d) = a.delay_ms {
            title.push_str(&format!(", declared delay {} ms", millis(d)));
        }
        if let Some(target) = &a.target {
            title.push_str(&format!(", target {target}"));
        }
        if let Some(m) = &a.message_id {
            title.push_str(&format!(", message {m}"));
        }
        out.push_str(&format!(
            "<g class=\"attempt {role}\"><rect class=\"{}{}{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"><title>{}</title></rect>",
            kind_css(a.outcome_kind),
            if a.finish_ms.is_none() { " unfinished" } else { "" },
            if a.untimed { " untimed" } else { "" },
            px(bx),
            px(by),
            px(bw),
            px(bar_h),
            esc(&title)
        ));
        let label = format!("#{}", a.number);
        if bw > label.len() as f64 * 6.5 + 4.0 {
            out.push_str(&format!(
                "<text class=\"in\" x=\"{}\" y=\"{}\">{}</text>",
                px(bx + 3.0),
                px(by + bar_h - 2.5),
                label
            ));
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    if t.attempts_omitted > 0 {
        out.push_str(&format!(
            "<p class=\"muted\">{} more attempts (the latest-starting ones) are not drawn; <code>attempt-funnel show</code> lists them all.</p>\n",
            count(t.attempts_omitted)
        ));
    }
    out.push_str("</figure>\n");
}

fn tables(out: &mut String, s: &Summary, gate: Option<&GateReport>) {
    out.push_str("<section id=\"tables\">\n<h2>Details</h2>\n");
    draw_sections(out, &sections(s, gate), s.timelines.len());
    out.push_str("</section>\n");
}

/// Sections as HTML tables and paragraphs. The first `linked` rows of the worst operations
/// link to their timelines.
fn draw_sections(out: &mut String, sections: &[super::layout::Section], linked: usize) {
    for section in sections {
        let id = section
            .title
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>();
        out.push_str(&format!("<h3 id=\"t-{id}\">{}</h3>\n", esc(&section.title)));
        if !section.headers.is_empty() {
            let limit = if section.kind == SectionKind::Bursts {
                BURSTS_LISTED
            } else {
                usize::MAX
            };
            out.push_str("<table>\n<thead><tr>");
            for (h, numeric) in section.headers.iter().zip(&section.numeric) {
                out.push_str(&format!(
                    "<th{}>{}</th>",
                    if *numeric { " class=\"n\"" } else { "" },
                    esc(h)
                ));
            }
            out.push_str("</tr></thead>\n<tbody>\n");
            for (r, row) in section.rows.iter().take(limit).enumerate() {
                out.push_str("<tr>");
                for (c, (cell, numeric)) in row.iter().zip(&section.numeric).enumerate() {
                    let is_linked =
                        section.kind == SectionKind::WorstOperations && c == 0 && r < linked;
                    let mut text = esc(cell);
                    if section.code.get(c).copied().unwrap_or(false) && cell != "–" {
                        text = format!("<code>{text}</code>");
                    }
                    if is_linked {
                        text = format!("<a href=\"#op-{r}\">{text}</a>");
                    }
                    out.push_str(&format!(
                        "<td{}>{text}</td>",
                        if *numeric { " class=\"n\"" } else { "" }
                    ));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</tbody>\n</table>\n");
            if section.rows.len() > limit {
                out.push_str(&format!(
                    "<p class=\"muted\">… and {} more; <code>--format json</code> lists them all.</p>\n",
                    count((section.rows.len() - limit) as u64)
                ));
            }
        }
        for note in &section.notes {
            out.push_str(&format!("<p>{}</p>\n", esc(note)));
        }
    }
}

/// The comparison page of `replay` and `diff`: the verdict and the replay's limit, both
/// funnels on one axis, the comparison's tables, and each worst operation's timeline as it
/// was above the timeline it became.
/// `files` and `sections` come from report/compare.rs, which owns what a comparison says;
/// this file only draws it.
pub fn render_comparison(
    c: &Comparison,
    verdict: &str,
    files: &[String],
    sections: &[super::layout::Section],
) -> String {
    let [first, second] = c.kind.labels();
    let title = match c.kind {
        Kind::Replay => "Replay: what the candidate policy would have made of this run",
        Kind::Diff => "Diff: what changed between two runs",
    };
    let mut out = String::with_capacity(64 * 1024);
    out.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n");
    out.push_str(&format!(
        "<title>attempt-funnel {} — {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        match c.kind {
            Kind::Replay => "replay",
            Kind::Diff => "diff",
        },
        esc(&files.join(", "))
    ));
    out.push_str(&format!("<header>\n<h1>{}</h1>\n", esc(title)));
    out.push_str(&format!("<p class=\"lede\">{}</p>\n", esc(verdict)));
    out.push_str(&format!(
        "<p class=\"meta\">{first}: {}; {second}: {}.</p>\n",
        esc(&c.before.input.files.join(", ")),
        esc(&c.after.input.files.join(", "))
    ));
    if let Some(limit) = &c.changes.limit {
        out.push_str(&format!(
            "<p class=\"meta\"><b>Limit:</b> {}</p>\n",
            esc(limit)
        ));
    }
    out.push_str("</header>\n");
    funnel_pair(&mut out, c);
    out.push_str("<section id=\"tables\">\n<h2>Changes</h2>\n");
    draw_sections(&mut out, sections, 0);
    out.push_str("</section>\n");
    if !c.timelines.is_empty() {
        out.push_str(&format!(
            "<section id=\"timelines\">\n<h2>Worst operations: {first} above, {second} below</h2>\n"
        ));
        out.push_str("<p class=\"muted\">For each of the worst operations, its attempt timeline as it was and as it became, on the same clock (time 0 is the operation's first start).</p>\n");
        out.push_str("<ul class=\"legend\">");
        for kind in OutcomeKind::ALL {
            out.push_str(&format!(
                "<li><span class=\"sw {0}\"></span>{1}</li>",
                kind_css(kind),
                kind.name()
            ));
        }
        out.push_str("</ul>\n");
        for (n, pair) in c.timelines.iter().enumerate() {
            out.push_str(&format!(
                "<div class=\"pair\" id=\"pair-{n}\">\n<h3>{} ({first})</h3>\n",
                esc(&pair.before.0.display_id())
            ));
            timeline(&mut out, 2 * n, &pair.before.1, Some(&pair.before.0));
            match &pair.after {
                Some((record, t)) => {
                    out.push_str(&format!(
                        "<h3>{} ({second})</h3>\n",
                        esc(&record.display_id())
                    ));
                    timeline(&mut out, 2 * n + 1, t, Some(record));
                }
                None => out.push_str(&format!(
                    "<p class=\"muted\">Not in the {second} run.</p>\n"
                )),
            }
            out.push_str("</div>\n");
        }
        out.push_str("</section>\n");
    }
    out.push_str(&format!(
        "<footer>Made by attempt-funnel {} (comparison schema {}). This page is self-contained: it loads nothing and runs no script. Every number on it is in <code>--format json</code>.</footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        crate::compare::SCHEMA_VERSION
    ));
    out
}

/// Both funnels on one axis: per hop, the first run's bar (faded) above the second's.
fn funnel_pair(out: &mut String, c: &Comparison) {
    let [first, second] = c.kind.labels();
    out.push_str("<section class=\"chart-section\" id=\"funnel\">\n<h2>Funnel per hop</h2>\n");
    out.push_str(&format!(
        "<p class=\"muted\">Attempts at each hop, {first} (faded) above {second}, on one scale; the dashed line is one attempt per operation.</p>\n"
    ));
    let hops = &c.changes.hops;
    let find = |s: &Summary, hop: &str| s.hops.iter().find(|h| h.hop == hop).cloned();
    let bar_h = 16.0;
    let row_h = 2.0 * bar_h + 14.0;
    let top = 8.0;
    let height = top + row_h * hops.len() as f64 + 6.0;
    let x0 = LABEL_W + 6.0;
    let bar_w = 640.0;
    let ops = c.changes.operations.before.max(c.changes.operations.after);
    let max = hops
        .iter()
        .map(|h| h.attempts.before.max(h.attempts.after))
        .chain([ops])
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x = |n: u64| x0 + n as f64 / max * bar_w;
    out.push_str(&format!(
        "<svg id=\"funnel-chart\" class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Attempts per hop, {first} and {second}\">\n",
        px(CHART_W),
        px(height)
    ));
    for (i, h) in hops.iter().enumerate() {
        let y = top + row_h * i as f64;
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"bold\">{}</text>\n",
            px(LABEL_W - 4.0),
            px(y + bar_h + 4.0),
            esc(&h.hop)
        ));
        for (side, (summary, label, opacity)) in [(&c.before, first, 0.45), (&c.after, second, 1.0)]
            .into_iter()
            .enumerate()
        {
            let y = y + side as f64 * (bar_h + 2.0);
            let Some(s) = find(summary, &h.hop) else {
                continue;
            };
            hop_bar(
                out,
                &s,
                &x,
                y,
                bar_h,
                &format!(" fill-opacity=\"{opacity}\""),
                &format!("{label}, "),
            );
            out.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" class=\"small\">{label}: <tspan class=\"bold\">{:.2}×</tspan> · {} attempts, {} retries</text>\n",
                px(x(s.attempts) + 8.0),
                px(y + bar_h - 4.0),
                s.amplification,
                count(s.attempts),
                count(s.retries + s.redeliveries)
            ));
        }
    }
    out.push_str(&format!(
        "<line class=\"l-ops\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>\n",
        px(x(ops)),
        px(top),
        px(height - 4.0)
    ));
    out.push_str("</svg>\n");
    out.push_str(&format!("<ul class=\"legend\"><li><span class=\"sw\" style=\"background:var(--orig);opacity:.45\"></span>{first} originals</li><li><span class=\"sw\" style=\"background:var(--retry);opacity:.45\"></span>{first} retries</li><li><span class=\"sw\" style=\"background:var(--orig)\"></span>{second} originals</li><li><span class=\"sw\" style=\"background:var(--retry)\"></span>{second} retries</li><li><span class=\"sw line\"></span>one attempt per operation</li></ul>\n"));
    out.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_in_operation_ids() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn axis_offsets_read_as_people_write_them() {
        assert_eq!(offset_text(0.0, 50.0), "0 ms");
        assert_eq!(offset_text(250.0, 50.0), "250 ms");
        assert_eq!(offset_text(1500.0, 500.0), "1.5 s");
        assert_eq!(offset_text(30_000.0, 10_000.0), "30 s");
        assert_eq!(offset_text(120_000.0, 60_000.0), "2 min");
        assert_eq!(offset_text(7_200_000.0, 3_600_000.0), "2 h");
        assert_eq!(offset_text(1e10, 1e10), "115.741 d");
        assert_eq!(px(12.04), "12");
        assert_eq!(px(12.25), "12.3");
    }
}

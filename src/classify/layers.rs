//! Layers within one line (docs/rules.md, "Two layers in one hop" and "Resends"): which
//! repeats are resends that repeat no failed work, and how many retrying layers made the
//! rest — one, or two whose attempts multiply (an application's retry loop around a
//! client that resends by itself: 3 × 3 = 9 sends for one line).
//!
//! Two things can show the second layer. Attempt numbers: a layer that numbers its sends
//! (a resend count, `x-envoy-attempt-count`, `amz-sdk-request`, the sends of one client
//! span numbered by the span reader) starts again from 1 for each attempt of the layer
//! around it, so numbers that go back down split the line into that outer layer's
//! attempts. And, where nothing numbers the sends, the timing: groups of sends back to
//! back, the groups far apart (the outer layer's backoff).

use std::ops::Range;

use crate::model::{Attempt, Millis, Outcome};

/// A gap between two groups of sends must be this many times every gap inside a group
/// for the groups to read as two layers: a third keeps the jitter of one layer's own
/// backoff (which varies by far less) from being taken for a second layer.
pub const LAYER_GAP_RATIO: f64 = 3.0;

/// The shortest gap (ms) between groups that reads as an outer layer's backoff: shorter is
/// no deliberate wait (see `BACK_TO_BACK_GAP_MS`), and groups that close are one layer's
/// sends whose gaps differ by scheduling noise.
pub const MIN_OUTER_GAP_MS: Millis = super::BACK_TO_BACK_GAP_MS;

/// Whether an attempt that ended so made the send after it a resend: a redirect (3xx but
/// 304 Not Modified, which is an answer, not a redirect) or an authentication challenge
/// (401 from the server, 407 from a proxy). The client follows up as HTTP says; no work
/// failed.
pub fn asks_for_resend(outcome: Option<Outcome>) -> bool {
    matches!(outcome, Some(Outcome::Http(code))
        if ((300..400).contains(&code) && code != 304) || code == 401 || code == 407)
}

/// How a line's tries (its original and its retries; resends left out) were made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineLayers {
    /// Each group of sends one attempt of the outer layer made, as ranges of the tries, in
    /// order. One group of all the tries when one layer made them.
    pub groups: Vec<Range<usize>>,
    /// The split into layers was read from timing alone.
    pub inferred: bool,
}

impl LineLayers {
    /// Two retrying layers: the outer layer's attempts repeat, and one of them was sent
    /// more than once by the inner layer.
    pub fn two_layers(&self) -> bool {
        self.groups.len() >= 2 && self.groups.iter().any(|g| g.len() >= 2)
    }
}

/// The layers of a line from its tries, in start order. `infer`: the timing may show the
/// layers where the attempt numbers do not (policy `infer_layers`).
pub fn line_layers(tries: &[&Attempt], infer: bool) -> LineLayers {
    let n = tries.len();
    let one = |inferred| LineLayers {
        groups: std::iter::once(0..n).collect(),
        inferred,
    };
    if n < 2 {
        return one(false);
    }
    // Numbers that go back down (or repeat) start the next attempt of the layer around
    // the one that numbers them. Unknown numbers say nothing.
    let numbers: Vec<Option<u32>> = tries.iter().map(|a| a.attempt).collect();
    let mut groups = Vec::new();
    let mut from = 0;
    let mut counted = false;
    for j in 1..n {
        match (numbers[j - 1], numbers[j]) {
            (Some(before), Some(now)) if now <= before => {
                groups.push(from..j);
                from = j;
            }
            (Some(before), Some(now)) if now > before => counted = true,
            _ => {}
        }
    }
    groups.push(from..n);
    if counted || !infer {
        // Some layer counted its sends: the numbers tell which layer sent what.
        return if groups.iter().any(|g| g.len() >= 2) {
            LineLayers {
                groups,
                inferred: false,
            }
        } else {
            one(false)
        };
    }
    inferred_groups(tries).map_or_else(
        || one(false),
        |groups| LineLayers {
            groups,
            inferred: true,
        },
    )
}

/// Groups of the same size m ≥ 2, k ≥ 2 of them, where every gap inside a group is under
/// a [`LAYER_GAP_RATIO`]th of every gap between groups: the clearest such split, or none.
/// Untimed or unfinished tries give no gaps, so no split.
fn inferred_groups(tries: &[&Attempt]) -> Option<Vec<Range<usize>>> {
    let n = tries.len();
    if n < 4 {
        return None;
    }
    let gaps: Vec<Millis> = tries
        .windows(2)
        .map(|w| w[1].gap_after(w[0]))
        .collect::<Option<_>>()?;
    let mut best: Option<(f64, usize)> = None;
    for m in (2..=n / 2).filter(|&m| n.is_multiple_of(m)) {
        // gaps[j - 1] lies between tries j - 1 and j: between groups when j is a multiple
        // of m.
        let (mut inside, mut between) = (Millis::NEG_INFINITY, Millis::INFINITY);
        for (g, &gap) in gaps.iter().enumerate() {
            if (g + 1) % m == 0 {
                between = between.min(gap);
            } else {
                inside = inside.max(gap);
            }
        }
        if between < MIN_OUTER_GAP_MS || inside * LAYER_GAP_RATIO >= between {
            continue;
        }
        // How clearly apart: the ratio of the gaps, with back-to-back groups (no gap inside,
        // or a negative one) the clearest. Ties go to fewer, larger groups.
        let clarity = if inside <= 0.0 {
            Millis::INFINITY
        } else {
            between / inside
        };
        if best.is_none_or(|(c, _)| clarity >= c) {
            best = Some((clarity, m));
        }
    }
    let (_, m) = best?;
    Some((0..n / m).map(|g| g * m..(g + 1) * m).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::tests_support::attempt;

    fn line(spec: &[(f64, f64, Option<u32>)]) -> Vec<Attempt> {
        spec.iter()
            .map(|&(s, f, n)| {
                let mut a = attempt(0, s, f);
                a.attempt = n;
                a
            })
            .collect()
    }

    fn layers(spec: &[(f64, f64, Option<u32>)], infer: bool) -> LineLayers {
        let attempts = line(spec);
        let tries: Vec<&Attempt> = attempts.iter().collect();
        line_layers(&tries, infer)
    }

    #[test]
    fn numbers_that_start_again_split_the_line_into_the_outer_layers_attempts() {
        // 3 × 3: an inner layer numbering its sends 1, 2, 3 under each outer attempt.
        let spec: Vec<_> = (0..9)
            .map(|i| {
                let t = (i / 3) as f64 * 1000.0 + (i % 3) as f64 * 20.0;
                (t, t + 10.0, Some(i % 3 + 1))
            })
            .collect();
        let l = layers(&spec, true);
        assert_eq!(l.groups, vec![0..3, 3..6, 6..9]);
        assert!(l.two_layers() && !l.inferred);
        // 1, 2, 3, 1: the last outer attempt succeeded on its first send.
        let l = layers(
            &[
                (0.0, 1.0, Some(1)),
                (2.0, 3.0, Some(2)),
                (4.0, 5.0, Some(3)),
                (900.0, 901.0, Some(1)),
            ],
            true,
        );
        assert_eq!(l.groups, vec![0..3, 3..4]);
        assert!(l.two_layers());
    }

    #[test]
    fn one_layer_whether_it_counts_or_not() {
        // A client counting its resends: one layer, however fast.
        let l = layers(
            &[
                (0.0, 1.0, Some(1)),
                (2.0, 3.0, Some(2)),
                (500.0, 501.0, Some(3)),
                (502.0, 503.0, Some(4)),
            ],
            true,
        );
        assert_eq!(l.groups, vec![0..4]);
        assert!(!l.two_layers());
        // Every attempt the first of its own (an HTTP client span without a resend count),
        // evenly spaced: one layer.
        let even: Vec<_> = (0..6)
            .map(|i| (i as f64 * 200.0, i as f64 * 200.0 + 10.0, Some(1)))
            .collect();
        assert!(!layers(&even, true).two_layers());
    }

    #[test]
    fn groups_back_to_back_far_apart_are_two_layers_inferred_from_timing() {
        // p-retry (3, 1 s apart) around axios-retry (3 sends back to back), no numbers.
        let spec: Vec<_> = (0..9)
            .map(|i| {
                let t = (i / 3) as f64 * 1000.0 + (i % 3) as f64 * 12.0;
                (t, t + 10.0, None)
            })
            .collect();
        let l = layers(&spec, true);
        assert_eq!(l.groups, vec![0..3, 3..6, 6..9]);
        assert!(l.two_layers() && l.inferred);
        // The policy turns it off.
        assert!(!layers(&spec, false).two_layers());
        // A gap inside a group a third of the gap between groups or more: one layer.
        let close: Vec<_> = (0..4)
            .map(|i| {
                let t = (i / 2) as f64 * 100.0 + (i % 2) as f64 * 40.0;
                (t, t + 5.0, None)
            })
            .collect();
        assert!(!layers(&close, true).two_layers());
        // Groups of unequal size: no split.
        let uneven = [
            (0.0, 1.0, None),
            (2.0, 3.0, None),
            (500.0, 501.0, None),
            (1000.0, 1001.0, None),
            (1002.0, 1003.0, None),
        ];
        assert!(!layers(&uneven, true).two_layers());
        // Groups a few milliseconds apart are scheduling noise, not a backoff.
        let noise = [
            (0.0, 1.0, None),
            (1.1, 2.0, None),
            (8.0, 9.0, None),
            (9.1, 10.0, None),
        ];
        assert!(!layers(&noise, true).two_layers());
    }

    #[test]
    fn redirects_and_challenges_ask_for_a_resend() {
        use Outcome::Http;
        for code in [301, 302, 303, 307, 308, 401, 407] {
            assert!(asks_for_resend(Some(Http(code))), "{code}");
        }
        for code in [200, 304, 400, 403, 429, 503] {
            assert!(!asks_for_resend(Some(Http(code))), "{code}");
        }
        assert!(!asks_for_resend(Some(Outcome::Error)) && !asks_for_resend(None));
    }
}

//! Group: rebuilds one operation's attempt tree. Links every attempt to the upstream
//! attempt that caused it and splits the attempts under each parent into lines (docs/rules.md).

use std::collections::HashMap;
use std::ops::Range;

use crate::model::{Attempt, Millis, Sym};
use crate::rules::Rules;

/// What caused an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Parent {
    /// An attempt at the first hop present: caused by the logical request itself.
    Request,
    /// The index of the upstream attempt.
    Attempt(u32),
    /// No upstream attempt could be found (it started before every upstream attempt).
    /// Each orphan stands alone, so orphans never count as multiplication.
    Orphan(u32),
}

/// What the attempts of a line address: one message on a queue hop, one target elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LineKey {
    Message(Sym),
    /// `None`: no target given; all such attempts are one target.
    Target(Option<Sym>),
}

/// Attempts at one hop, under one parent, addressing one thing, in start order. Its
/// attempt indexes are its tree's ([`Tree::attempts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub hop: u16,
    pub parent: Parent,
    pub key: LineKey,
    /// Where its attempt indexes are in [`Tree::order`].
    members: Range<u32>,
}

impl Line {
    /// Repeats keyed by message ID on a queue hop are redeliveries, not retries.
    pub fn is_delivery_line(&self) -> bool {
        matches!(self.key, LineKey::Message(_))
    }

    /// How many attempts it has: the original and its retries or redeliveries.
    pub fn len(&self) -> usize {
        self.members.len()
    }
}

/// One operation's attempt tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tree {
    pub parent: Vec<Parent>,
    /// Lines in canonical order: by hop, then parent, then key.
    pub lines: Vec<Line>,
    /// The line of each attempt.
    pub line_of: Vec<u32>,
    /// Attempt indexes line by line, each line's a run of them: one vector for the tree,
    /// not one per line (a few lines for each of millions of operations would each be
    /// allocated, grown and freed).
    order: Vec<u32>,
}

impl Tree {
    /// The attempt indexes of `line`, one of this tree's lines: the first is the original,
    /// the rest are retries or redeliveries.
    pub fn attempts(&self, line: &Line) -> &[u32] {
        &self.order[line.members.start as usize..line.members.end as usize]
    }
}

/// Builds the tree of one operation. `attempts` is in canonical order (hop, then start).
pub fn build_tree(attempts: &[Attempt], rules: &Rules, trace_end_ms: Millis) -> Tree {
    let mut tree = Tree::default();
    TreeBuilder::default().build(&mut tree, attempts, rules, trace_end_ms);
    tree
}

/// Builds trees one after another into the same memory: a tree's vectors and the working
/// lists behind them, allocated and grown for each of millions of operations, were most of
/// the per-operation pass's allocations (a worker keeps one builder and one tree).
#[derive(Default)]
pub struct TreeBuilder {
    /// (hop, parent, key, attempt index) of each attempt, sorted into lines.
    keyed: Vec<(u16, Parent, LineKey, u32)>,
    /// Each hop's run of attempts.
    hop_ranges: Vec<(u16, Range<usize>)>,
    /// The open upstream attempts of the time rule (see `Upstream`).
    open: Vec<(usize, Millis)>,
}

impl TreeBuilder {
    /// Makes `tree` the tree of `attempts` (as [`build_tree`]), whatever it held.
    pub fn build(
        &mut self,
        tree: &mut Tree,
        attempts: &[Attempt],
        rules: &Rules,
        trace_end_ms: Millis,
    ) {
        link_parents(attempts, trace_end_ms, self, &mut tree.parent);
        let keyed = &mut self.keyed;
        keyed.clear();
        keyed.extend(
            attempts
                .iter()
                .enumerate()
                .map(|(i, a)| (a.hop, tree.parent[i], line_key(a, rules), i as u32)),
        );
        // Attempt indexes already follow start order within a hop, so sorting by (hop,
        // parent, key, index) lists each line's attempts in start order.
        keyed.sort_unstable();
        let Tree {
            lines,
            line_of,
            order,
            ..
        } = tree;
        lines.clear();
        line_of.clear();
        line_of.resize(attempts.len(), 0);
        order.clear();
        for &(hop, parent, key, index) in keyed.iter() {
            let at = order.len() as u32;
            order.push(index);
            match lines.last_mut() {
                Some(line) if line.hop == hop && line.parent == parent && line.key == key => {
                    line.members.end = at + 1
                }
                _ => lines.push(Line {
                    hop,
                    parent,
                    key,
                    members: at..at + 1,
                }),
            }
            line_of[index as usize] = (lines.len() - 1) as u32;
        }
    }
}

pub fn line_key(a: &Attempt, rules: &Rules) -> LineKey {
    match a.message_id {
        Some(m) if rules.queue_hops[a.hop as usize] => LineKey::Message(m),
        _ => LineKey::Target(a.target),
    }
}

/// The parent rule of docs/rules.md: `parent_id` → `span_id`; else the latest upstream
/// attempt whose interval contains this attempt's start; else the latest upstream attempt
/// that started before it. Upstream means the nearest hop before this one that has attempts.
///
/// O(n log n) in the attempts: span IDs are looked up in a hash map, and the time rule
/// keeps, per hop, the upstream attempts that could still contain a later start.
///
/// Into `parents`, with `scratch`'s working lists.
fn link_parents(
    attempts: &[Attempt],
    trace_end_ms: Millis,
    scratch: &mut TreeBuilder,
    parents: &mut Vec<Parent>,
) {
    parents.clear();
    let Some(first_hop) = attempts.first().map(|a| a.hop) else {
        return;
    };
    // Start index of each hop's run of attempts (attempts are sorted by hop).
    let hop_ranges = &mut scratch.hop_ranges;
    hop_ranges.clear();
    for (i, a) in attempts.iter().enumerate() {
        match hop_ranges.last_mut() {
            Some((hop, range)) if *hop == a.hop => range.end = i + 1,
            _ => hop_ranges.push((a.hop, i..i + 1)),
        }
    }
    // The first attempt (lowest hop, then earliest) with each span ID: if it is not
    // upstream of an attempt, no attempt with that span ID is.
    let mut by_span_id: HashMap<Sym, usize> = HashMap::new();
    for (i, a) in attempts.iter().enumerate() {
        if let Some(span) = a.span_id {
            by_span_id.entry(span).or_insert(i);
        }
    }
    parents.reserve(attempts.len());
    // One stack of open upstream attempts for all hops, emptied for each (see `Upstream`).
    let mut open = std::mem::take(&mut scratch.open);
    for (h, (hop, range)) in hop_ranges.iter().enumerate() {
        if *hop == first_hop {
            parents.extend(range.clone().map(|_| Parent::Request));
            continue;
        }
        let above = hop_ranges[h - 1].1.clone();
        let mut upstream = Upstream::new(attempts, above, trace_end_ms, std::mem::take(&mut open));
        for i in range.clone() {
            let a = &attempts[i];
            let by_span = a
                .parent_id
                .and_then(|p| by_span_id.get(&p).copied())
                .filter(|&u| attempts[u].hop < a.hop);
            // Attempts of a hop are in start order, so the upstream candidates only grow.
            let by_time = upstream.parent_at(a.start_ms);
            parents.push(match by_span.or(by_time) {
                Some(u) => Parent::Attempt(u as u32),
                None => Parent::Orphan(i as u32),
            });
        }
        open = upstream.open;
    }
    scratch.open = open;
}

/// The upstream attempts of one hop, for the time rule, asked in increasing start order.
struct Upstream<'a> {
    attempts: &'a [Attempt],
    range: std::ops::Range<usize>,
    trace_end_ms: Millis,
    /// Upstream attempts started so far (an index into `range`).
    started: usize,
    /// Of those, the ones no later-started attempt outlasts: ends strictly decreasing from
    /// the bottom. The latest attempt that contains a time `t` is the last one here whose
    /// end is at or after `t` (an attempt dropped from here was outlasted by a later one,
    /// which contains `t` whenever it does).
    open: Vec<(usize, Millis)>,
}

impl<'a> Upstream<'a> {
    /// `open`: an empty vector to keep the open attempts in (its memory reused).
    fn new(
        attempts: &'a [Attempt],
        range: std::ops::Range<usize>,
        trace_end_ms: Millis,
        mut open: Vec<(usize, Millis)>,
    ) -> Self {
        open.clear();
        Upstream {
            attempts,
            range,
            trace_end_ms,
            started: 0,
            open,
        }
    }

    /// The latest upstream attempt whose interval contains `start_ms`, else the latest
    /// that started at or before it; `None` when none had started.
    fn parent_at(&mut self, start_ms: Millis) -> Option<usize> {
        let candidates = &self.attempts[self.range.clone()];
        while self.started < candidates.len() && candidates[self.started].start_ms <= start_ms {
            let end = candidates[self.started].end_or(self.trace_end_ms);
            while self.open.last().is_some_and(|&(_, e)| e <= end) {
                self.open.pop();
            }
            self.open.push((self.started, end));
            self.started += 1;
        }
        if self.started == 0 {
            return None;
        }
        let containing = self.open.partition_point(|&(_, end)| end >= start_ms);
        let k = match containing {
            0 => self.started - 1,
            n => self.open[n - 1].0,
        };
        Some(self.range.start + k)
    }
}

#[cfg(test)]
pub mod tests_support {
    use crate::model::{Attempt, SourceRef};

    pub fn attempt(hop: u16, start: f64, finish: f64) -> Attempt {
        Attempt {
            source: SourceRef { file: 0, line: 0 },
            hop,
            attempt: None,
            start_ms: start,
            finish_ms: Some(finish),
            start_inferred: false,
            outcome: None,
            target: None,
            message_id: None,
            delivery: None,
            span_id: None,
            parent_id: None,
            delay_ms: None,
            retry_after_ms: None,
            untimed: false,
            effect: false,
            hidden: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::attempt;
    use super::*;
    use crate::rules::HopOrder;

    fn rules() -> Rules {
        Rules::new(HopOrder::default())
    }

    #[test]
    fn links_by_span_then_containment_then_latest_earlier() {
        let mut a = vec![
            attempt(0, 0.0, 100.0),   // 0 caller #1
            attempt(0, 200.0, 300.0), // 1 caller #2
            attempt(3, 10.0, 20.0),   // 2 inside caller #1
            attempt(3, 150.0, 160.0), // 3 between: latest earlier = caller #1
            attempt(3, 250.0, 260.0), // 4 explicit parent: caller #1 despite containment
        ];
        a[0].span_id = Some(7);
        a[4].parent_id = Some(7);
        let tree = build_tree(&a, &rules(), 1000.0);
        assert_eq!(
            tree.parent,
            vec![
                Parent::Request,
                Parent::Request,
                Parent::Attempt(0),
                Parent::Attempt(0),
                Parent::Attempt(0)
            ]
        );
    }

    #[test]
    fn a_downstream_attempt_before_any_upstream_one_is_an_orphan() {
        let a = vec![attempt(0, 100.0, 200.0), attempt(3, 50.0, 60.0)];
        let tree = build_tree(&a, &rules(), 1000.0);
        assert_eq!(tree.parent[1], Parent::Orphan(1));
    }

    #[test]
    fn lines_split_by_target_elsewhere_and_by_message_on_the_consumer_hop() {
        let mut a = vec![
            attempt(0, 0.0, 1000.0),
            attempt(2, 10.0, 20.0),
            attempt(2, 30.0, 40.0),
            attempt(3, 12.0, 18.0),
            attempt(3, 13.0, 19.0),
        ];
        a[1].message_id = Some(1);
        a[2].message_id = Some(1);
        a[3].target = Some(5);
        a[4].target = Some(6);
        let tree = build_tree(&a, &rules(), 1000.0);
        let consumer: Vec<_> = tree.lines.iter().filter(|l| l.hop == 2).collect();
        assert_eq!(consumer.len(), 1);
        assert!(consumer[0].is_delivery_line());
        assert_eq!(tree.attempts(consumer[0]), [1, 2]);
        assert_eq!(tree.lines.iter().filter(|l| l.hop == 3).count(), 2);
    }

    /// The parent rule as first written: a scan per attempt. The fast one must agree.
    fn parents_by_scan(attempts: &[Attempt], trace_end_ms: Millis) -> Vec<Parent> {
        let first_hop = attempts[0].hop;
        (0..attempts.len())
            .map(|i| {
                let a = &attempts[i];
                if a.hop == first_hop {
                    return Parent::Request;
                }
                if let Some(u) = a.parent_id.and_then(|p| {
                    attempts
                        .iter()
                        .position(|u| u.hop < a.hop && u.span_id == Some(p))
                }) {
                    return Parent::Attempt(u as u32);
                }
                let upstream_hop = attempts[..i]
                    .iter()
                    .rev()
                    .map(|u| u.hop)
                    .find(|&h| h < a.hop);
                let Some(up) = upstream_hop else {
                    return Parent::Orphan(i as u32);
                };
                let candidates: Vec<usize> = (0..attempts.len())
                    .filter(|&k| attempts[k].hop == up && attempts[k].start_ms <= a.start_ms)
                    .collect();
                let containing = candidates
                    .iter()
                    .rev()
                    .find(|&&k| attempts[k].end_or(trace_end_ms) >= a.start_ms);
                match containing.or(candidates.last()) {
                    Some(&k) => Parent::Attempt(k as u32),
                    None => Parent::Orphan(i as u32),
                }
            })
            .collect()
    }

    #[test]
    fn linking_in_n_log_n_agrees_with_a_scan_per_attempt() {
        // A small deterministic generator: starts, lengths and explicit parents of every
        // kind, nested and disjoint intervals, ties, unfinished attempts.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        // One builder for all the cases: what a tree before left in it changes nothing.
        let (mut builder, mut parents) = (TreeBuilder::default(), Vec::new());
        for _ in 0..300 {
            let mut a: Vec<Attempt> = Vec::new();
            for hop in [0u16, 1, 3] {
                for _ in 0..next(12) {
                    let start = next(100) as f64;
                    let mut x = attempt(hop, start, start + next(60) as f64);
                    if next(5) == 0 {
                        x.finish_ms = None;
                    }
                    if next(3) == 0 {
                        x.span_id = Some(next(6) as Sym);
                    }
                    if next(3) == 0 {
                        x.parent_id = Some(next(6) as Sym);
                    }
                    a.push(x);
                }
            }
            if a.is_empty() {
                continue;
            }
            a.sort_by(|x, y| x.hop.cmp(&y.hop).then(x.start_ms.total_cmp(&y.start_ms)));
            link_parents(&a, 170.0, &mut builder, &mut parents);
            assert_eq!(parents, parents_by_scan(&a, 170.0), "{a:?}");
        }
    }
}

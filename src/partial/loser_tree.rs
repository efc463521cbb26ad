//! The loser tree (tournament tree) that the merge takes the least of its sources' heads
//! with: it owns one head per source, each source's next item in order, and tells which
//! source holds the least.
//!
//! Why not a binary heap: a heap's entry replaced at the top is sifted down with two
//! compares a level (its children against each other, then the least of them against it),
//! and the merge's keys are strings, so those compares were a quarter of its reading
//! thread's time. A loser tree keeps at each match of the tournament the head that lost
//! it; the new head of the winner's source replays only the matches on its way up to the
//! root, one compare a level.

use std::cmp::Ordering;

/// The least of `k` heads, each the next item of one source, with ties to the source of
/// the lower index: the merge of sorted sources is then the stable sort of their items by
/// source, as `(item, source)` orders them. A source that ran dry has no head, which loses
/// to every head.
pub struct LoserTree<T> {
    /// Each source's head, `None` once it ran dry.
    heads: Vec<Option<T>>,
    /// The tournament, in the layout of a binary heap over `2k` nodes: source `s` plays at
    /// leaf `k + s`, node `n`'s match is between nodes `2n` and `2n + 1`. For `1 ≤ n < k`,
    /// `nodes[n]` is the source that lost the match at `n`; `nodes[0]` is the winner of
    /// them all. Any `k` fills this layout, a power of two or not.
    nodes: Vec<usize>,
}

impl<T: Ord> LoserTree<T> {
    /// The tournament of `heads`, one per source (`None` for a source that is empty).
    pub fn new(heads: Vec<Option<T>>) -> LoserTree<T> {
        let k = heads.len();
        let mut tree = LoserTree {
            heads,
            nodes: vec![0; k.max(1)],
        };
        // Played once from the leaves up: each match's winner goes on to the next.
        let mut winners = vec![0; 2 * k];
        for (s, leaf) in winners[k..].iter_mut().enumerate() {
            *leaf = s;
        }
        for n in (1..k).rev() {
            let (a, b) = (winners[2 * n], winners[2 * n + 1]);
            let (winner, loser) = if tree.beats(a, b) { (a, b) } else { (b, a) };
            winners[n] = winner;
            tree.nodes[n] = loser;
        }
        // Node 1 is the root, or source 0's leaf when there is only that one.
        tree.nodes[0] = winners.get(1).copied().unwrap_or(0);
        tree
    }

    /// The source that holds the least head, `None` when every source ran dry.
    pub fn winner(&self) -> Option<usize> {
        let s = self.nodes[0];
        self.heads.get(s)?.as_ref().map(|_| s)
    }

    /// Replaces the least head by `next`, the next item of its source (`None` when it ran
    /// dry), and returns it; `None` (and `next` dropped) when every source had run dry
    /// already. Always inline, as [`Self::beats`]: once a row, and the compiler inlined it
    /// or not from one build to the next.
    #[inline(always)]
    pub fn replace_winner(&mut self, next: Option<T>) -> Option<T> {
        let mut winner = self.winner()?;
        let least = std::mem::replace(&mut self.heads[winner], next);
        // Only the matches on the way up from the replaced leaf change: the others were
        // played between heads that did not.
        let mut n = (self.heads.len() + winner) / 2;
        while n > 0 {
            let loser = self.nodes[n];
            if self.beats(loser, winner) {
                self.nodes[n] = winner;
                winner = loser;
            }
            n /= 2;
        }
        self.nodes[0] = winner;
        least
    }

    /// Whether source `a`'s head comes before source `b`'s: `(head, source)` in order, a
    /// source without a head last. Always inline: played once a level; out of line (as the
    /// compiler once left it) it cost 10 M more instructions on 100 k spilled rows.
    #[inline(always)]
    fn beats(&self, a: usize, b: usize) -> bool {
        match (&self.heads[a], &self.heads[b]) {
            (Some(x), Some(y)) => match x.cmp(y) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => a < b,
            },
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => a < b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every item of `sources` (each sorted), with its source, in the order the tree gives
    /// them out.
    fn merged(sources: &[Vec<u8>]) -> Vec<(u8, usize)> {
        let mut rest: Vec<_> = sources.iter().map(|s| s.iter().copied()).collect();
        let mut tree = LoserTree::new(rest.iter_mut().map(Iterator::next).collect());
        let mut out = Vec::new();
        while let Some(s) = tree.winner() {
            let next = rest[s].next();
            out.push((tree.replace_winner(next).expect("a winner has a head"), s));
        }
        assert_eq!(
            tree.replace_winner(Some(0)),
            None,
            "nothing left, nothing given"
        );
        out
    }

    #[test]
    fn no_source_or_only_empty_ones_give_nothing() {
        assert_eq!(merged(&[]), vec![]);
        assert_eq!(merged(&[vec![]]), vec![]);
        assert_eq!(merged(&[vec![], vec![], vec![]]), vec![]);
    }

    #[test]
    fn one_source_comes_out_as_it_is() {
        assert_eq!(merged(&[vec![1, 1, 4]]), vec![(1, 0), (1, 0), (4, 0)]);
    }

    #[test]
    fn equal_items_come_out_together_by_source() {
        // Three sources, so that source 2 plays a match of its own high up the tree.
        let out = merged(&[vec![2, 5], vec![2, 2], vec![1, 2]]);
        assert_eq!(out, vec![(1, 2), (2, 0), (2, 1), (2, 1), (2, 2), (5, 0)]);
    }

    proptest! {
        /// Any sorted sources, some empty, many with items in common, merge into the
        /// sort of all their items by (item, source): the order of a heap of
        /// `(head, source)`.
        #[test]
        fn the_merge_of_sorted_sources_is_the_sort_by_item_then_source(
            mut sources in prop::collection::vec(prop::collection::vec(0u8..12, 0..20), 0..19),
        ) {
            for s in &mut sources {
                s.sort_unstable();
            }
            let mut expected: Vec<(u8, usize)> = sources
                .iter()
                .enumerate()
                .flat_map(|(s, items)| items.iter().map(move |&x| (x, s)))
                .collect();
            expected.sort();
            prop_assert_eq!(merged(&sources), expected);
        }
    }
}

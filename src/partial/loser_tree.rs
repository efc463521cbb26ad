//! The loser tree (tournament tree) that the merge takes the least of its sources' heads
//! with: it owns one head per source, each source's next item in order, and tells which
//! source holds the least.
//!
//! Why not a binary heap: a heap's entry replaced at the top is sifted down with two
//! compares a level (its children against each other, then the least of them against it),
//! and the merge's keys are strings, so those compares are what its reading thread
//! spends its time on. A loser tree keeps at each match of the tournament the head that lost
//! it; the new head of the winner's source replays only the matches on its way up to the
//! root, one compare a level.
//!
//! Offset-value codes (Graefe's, for merging sorted runs): an item may say where it first
//! differs from the item before it ([`Coded`]), and a match between two items coded
//! against the same one is then decided by two integers, the strings compared only from
//! where both codes leave off. The merge's keys share long prefixes with their neighbours
//! (`run-1`, `op-0001234…`): at 154 partitions, the tree and its two string compares a
//! level were about two fifths of the merge's reading thread (perf, 10 M operations).

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
    /// Each head's code ([`Coded`]) against the head it last lost to, or, for the winner,
    /// against the item given out before it.
    codes: Vec<u64>,
}

/// An item that can say where it first differs from another: its order is that of a
/// sequence of symbols, and an offset-value code packs the first position where an item
/// differs from a lesser one and its symbol there, so that of two items coded against the
/// same lesser one, the smaller code is the lesser item (the one that shares more with
/// it, or has the lesser symbol where both first differ from it). Equal codes leave the
/// match to [`Coded::play`], which compares past that position. Code 0 is an item equal
/// to the one it is coded against.
///
/// Without codes (the default methods) every code is 0 and every match is played by
/// `Ord` alone, as a plain loser tree does.
pub trait Coded: Ord {
    /// The code of `self` against `before`, an item not after it (`None`: against an
    /// item before every item).
    fn code_against(&self, _before: Option<&Self>) -> u64 {
        0
    }

    /// The order of `self` and `other`, both with `code` against the same item, and the
    /// code of the later one against the earlier (0 when they are equal).
    fn play(&self, other: &Self, _code: u64) -> (Ordering, u64) {
        (self.cmp(other), 0)
    }
}

/// The code of an item that first differs at `offset` from the one it is coded against,
/// with `symbol` there: a later first difference makes a smaller code, then a lesser
/// symbol. Never 0 (offsets are below `u32::MAX`).
pub fn offset_code(offset: u32, symbol: u16) -> u64 {
    (u64::from(u32::MAX - offset) << 16) | u64::from(symbol)
}

/// The offset a code (not 0) was made with.
pub fn code_offset(code: u64) -> u32 {
    u32::MAX - (code >> 16) as u32
}

/// Where byte strings `x` and `y` first differ at or after `from`, each read as its bytes
/// followed by an end that comes before every byte (see [`symbol`]); `None` when they are
/// equal from there.
pub fn first_difference(x: &[u8], y: &[u8], from: usize) -> Option<usize> {
    let n = x.len().min(y.len());
    if from < n {
        if let Some(i) = x[from..n].iter().zip(&y[from..n]).position(|(a, b)| a != b) {
            return Some(from + i);
        }
    }
    (x.len() != y.len()).then_some(n.max(from))
}

/// Symbol `j` of a byte string followed by its end: each byte one up, the end 0.
pub fn symbol(text: &[u8], j: usize) -> u16 {
    text.get(j).map_or(0, |&b| u16::from(b) + 1)
}

impl<T: Coded> LoserTree<T> {
    /// The tournament of `heads`, one per source (`None` for a source that is empty).
    pub fn new(heads: Vec<Option<T>>) -> LoserTree<T> {
        let k = heads.len();
        // Every head coded against an item before them all: each match's winner goes on
        // with that code, its loser gets one against it.
        let codes = heads
            .iter()
            .map(|head| head.as_ref().map_or(0, |h| h.code_against(None)))
            .collect();
        let mut tree = LoserTree {
            heads,
            nodes: vec![0; k.max(1)],
            codes,
        };
        // Played once from the leaves up: each match's winner goes on to the next.
        let mut winners = vec![0; 2 * k];
        for (s, leaf) in winners[k..].iter_mut().enumerate() {
            *leaf = s;
        }
        for n in (1..k).rev() {
            let (winner, loser) = tree.play(winners[2 * n], winners[2 * n + 1]);
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
    /// already. Always inline, as [`Self::play`]: once a row, and the compiler inlined it
    /// or not from one build to the next.
    #[inline(always)]
    pub fn replace_winner(&mut self, next: Option<T>) -> Option<T> {
        let mut winner = self.winner()?;
        // The new head coded against the item it follows in its source, which is the item
        // given out: every head on the way up is coded against it too.
        let code = match (&next, &self.heads[winner]) {
            (Some(next), Some(before)) => next.code_against(Some(before)),
            _ => 0,
        };
        let least = std::mem::replace(&mut self.heads[winner], next);
        self.codes[winner] = code;
        // Only the matches on the way up from the replaced leaf change: the others were
        // played between heads that did not.
        let mut n = (self.heads.len() + winner) / 2;
        while n > 0 {
            let (up, loser) = self.play(self.nodes[n], winner);
            self.nodes[n] = loser;
            winner = up;
            n /= 2;
        }
        self.nodes[0] = winner;
        least
    }

    /// The match of sources `a` and `b`, both heads coded against the same item: (winner,
    /// loser), the loser's code now against the winner. `(head, source)` in order, a source
    /// without a head last. A loser whose code was the greater keeps it: it first differs
    /// from the winner where it first differed from the item both were coded against.
    /// Always inline: played once a level; out of line (as the compiler once left the
    /// plain compare) it cost 10 M more instructions on 100 k spilled rows.
    #[inline(always)]
    fn play(&mut self, a: usize, b: usize) -> (usize, usize) {
        let by_source = if a < b { (a, b) } else { (b, a) };
        match (&self.heads[a], &self.heads[b]) {
            (Some(x), Some(y)) => {
                let (code_a, code_b) = (self.codes[a], self.codes[b]);
                match code_a.cmp(&code_b) {
                    Ordering::Less => (a, b),
                    Ordering::Greater => (b, a),
                    Ordering::Equal => {
                        let (order, later) = x.play(y, code_a);
                        let (winner, loser) = match order {
                            Ordering::Less => (a, b),
                            Ordering::Greater => (b, a),
                            Ordering::Equal => by_source,
                        };
                        self.codes[loser] = later;
                        (winner, loser)
                    }
                }
            }
            (Some(_), None) => (a, b),
            (None, Some(_)) => (b, a),
            (None, None) => by_source,
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use proptest::prelude::*;

    impl Coded for u8 {}

    /// A byte string with offset-value codes, as the merge's keys have.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Text(Vec<u8>);

    impl Coded for Text {
        fn code_against(&self, before: Option<&Text>) -> u64 {
            let at = match before {
                None => Some(0),
                Some(before) => first_difference(&self.0, &before.0, 0),
            };
            at.map_or(0, |at| offset_code(at as u32, symbol(&self.0, at)))
        }

        fn play(&self, other: &Text, code: u64) -> (Ordering, u64) {
            let from = if code == 0 {
                0
            } else {
                code_offset(code) as usize + 1
            };
            match first_difference(&self.0, &other.0, from) {
                None => (Ordering::Equal, 0),
                Some(at) => {
                    let (mine, theirs) = (symbol(&self.0, at), symbol(&other.0, at));
                    let later = offset_code(at as u32, mine.max(theirs));
                    (mine.cmp(&theirs), later)
                }
            }
        }
    }

    /// `sources` each sorted, and every item of them with its source in the order a
    /// merge must give them out: the sort by (item, source).
    pub fn sorted<T: Ord + Clone>(sources: Vec<Vec<T>>) -> (Vec<Vec<T>>, Vec<(T, usize)>) {
        let sources: Vec<Vec<T>> = sources
            .into_iter()
            .map(|mut s| {
                s.sort();
                s
            })
            .collect();
        let mut expected: Vec<(T, usize)> = sources
            .iter()
            .enumerate()
            .flat_map(|(s, items)| items.iter().map(move |x| (x.clone(), s)))
            .collect();
        expected.sort();
        (sources, expected)
    }

    /// Every item of `sources` (each sorted), with its source, in the order the tree gives
    /// them out.
    pub fn merged<T: Coded + Clone>(sources: &[Vec<T>]) -> Vec<(T, usize)> {
        let mut rest: Vec<_> = sources.iter().map(|s| s.iter().cloned()).collect();
        let mut tree = LoserTree::new(rest.iter_mut().map(Iterator::next).collect());
        let mut out = Vec::new();
        while let Some(s) = tree.winner() {
            let next = rest[s].next();
            out.push((tree.replace_winner(next).expect("a winner has a head"), s));
        }
        assert!(
            tree.replace_winner(sources.iter().flatten().next().cloned())
                .is_none(),
            "nothing left, nothing given"
        );
        out
    }

    #[test]
    fn no_source_or_only_empty_ones_give_nothing() {
        assert_eq!(merged::<u8>(&[]), vec![]);
        assert_eq!(merged::<u8>(&[vec![]]), vec![]);
        assert_eq!(merged::<u8>(&[vec![], vec![], vec![]]), vec![]);
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
            sources in prop::collection::vec(prop::collection::vec(0u8..12, 0..20), 0..19),
        ) {
            let (sources, expected) = sorted(sources);
            prop_assert_eq!(merged(&sources), expected);
        }

        /// The same with codes: strings of a small alphabet, so that they share prefixes,
        /// are prefixes of each other and are equal across sources, as the merge's keys.
        #[test]
        fn coded_sources_merge_as_the_sort_by_item_then_source(
            sources in prop::collection::vec(
                prop::collection::vec(prop::collection::vec(0u8..3, 0..5), 0..20),
                0..19,
            ),
        ) {
            let sources = sources.into_iter().map(|s| s.into_iter().map(Text).collect());
            let (sources, expected) = sorted(sources.collect());
            prop_assert_eq!(merged(&sources), expected);
        }
    }
}

//! Synchronized bursts: across all operations, clusters of retries at one hop that start
//! within one narrow window, from many operations, far more than the retry rate on either
//! side of them explains. Aligned failures retried on one fixed schedule make them;
//! jittered retries spread out and do not. The rule is described in docs/rules.md
//! ("Synchronized bursts"); this module finds the bursts of one hop in O(n log n), from
//! its retry starts read in time order a segment at a time ([`BurstFinder`]), a large
//! segment's windows scanned in stretches side by side.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::Range;

use rayon::prelude::*;

use crate::model::Millis;
use crate::rules::BurstParams;

/// Windows of width W on each side of a candidate whose median count is its background.
/// Ten reach half a second at the default 50 ms: wide enough that a cluster's own tail
/// or a neighbouring sub-cluster is one busy window among ten and cannot become the
/// background by itself (the median ignores it), narrow enough to follow a changing load.
pub const NEIGHBOUR_WINDOWS: usize = 10;

/// The least background a side can have, in retries per window: without it, a window with
/// no retries nearby would make any handful of retries infinitely unlikely.
pub const MIN_BACKGROUND_RETRIES: f64 = 1.0;

/// A window's count must be this unlikely under Poisson(background) to be a burst: with
/// thousands of windows scanned per run, one in a million keeps chance hits rare.
pub const BURST_P_VALUE: f64 = 1e-6;

/// Resolution of the clocks in the logs: a sub-window narrower than this is this wide.
pub const TIME_RESOLUTION_MS: Millis = 1.0;

/// Most distinct start instants a candidate window is narrowed on. A window with more is
/// narrowed on this many of them, evenly spaced (its first and last always among them), so
/// narrowing costs the same however many retries the window holds; a burst's edge is then
/// placed to within 1/`NARROW_INSTANTS` of the window's instants. Retry clusters of real
/// incidents have far fewer instants per window than this, and are narrowed exactly.
pub const NARROW_INSTANTS: usize = 48;

/// One retry start, with the operation it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct RetryPoint {
    pub start_ms: Millis,
    pub op: u32,
    /// The backoff before it, NaN when unknown: an `Option<Millis>` would make a point 32
    /// bytes instead of 24, and the merge holds every retry start of a hop at once (13.4 M
    /// of them at the gateway of 30 M operations: the run's peak).
    delay_ms: Millis,
}

impl RetryPoint {
    pub fn new(start_ms: Millis, op: u32, delay_ms: Option<Millis>) -> RetryPoint {
        RetryPoint {
            start_ms,
            op,
            // A delay is a difference of finite times or a declared finite number, so NaN
            // is free to mean "unknown".
            delay_ms: delay_ms.unwrap_or(Millis::NAN),
        }
    }

    pub fn delay_ms(&self) -> Option<Millis> {
        (!self.delay_ms.is_nan()).then_some(self.delay_ms)
    }

    /// The order the burst search reads a hop's retry starts in: by start, then by
    /// operation and delay, so that points comparing equal are the same bits (an unstable
    /// sort and a merge of sorted runs then give one sequence).
    pub fn order(&self, other: &RetryPoint) -> Ordering {
        self.start_ms
            .total_cmp(&other.start_ms)
            .then(self.op.cmp(&other.op))
            .then(
                self.delay_ms()
                    .map(f64::to_bits)
                    .cmp(&other.delay_ms().map(f64::to_bits)),
            )
    }
}

impl PartialEq for RetryPoint {
    fn eq(&self, other: &RetryPoint) -> bool {
        (self.start_ms, self.op, self.delay_ms()) == (other.start_ms, other.op, other.delay_ms())
    }
}

const _: () = assert!(std::mem::size_of::<RetryPoint>() == 24);

/// A detected burst at one hop.
#[derive(Debug, Clone, PartialEq)]
pub struct Burst {
    pub hop: u16,
    pub start_ms: Millis,
    pub width_ms: Millis,
    pub retries: usize,
    /// Distinct operations, sorted.
    pub ops: Vec<u32>,
    /// The background of its most significant window: retries expected in one window of W.
    pub expected_retries: f64,
    /// The probability of its most significant narrowed window, at that window's width.
    pub p_value: f64,
    /// Smallest and largest backoff delay before the burst's retries (equal: no jitter).
    pub delay_min_ms: Option<Millis>,
    pub delay_max_ms: Option<Millis>,
}

/// A significant window narrowed to its least likely sub-window: points `[from, to)`.
#[derive(Debug, Clone, Copy)]
struct Narrowed {
    from: usize,
    to: usize,
    ln_p: f64,
    background: f64,
}

/// Retry starts anchored per segment: past this many waiting, the ones before the latest
/// start make a segment, searched once the look-ahead it needs has arrived. Large enough
/// that a segment's look-back and look-ahead (a second at the default window) are a small
/// part of it; small enough that a hop of any size is held a few tens of megabytes at a
/// time (the busiest hop of 30 M operations, 13.4 M retry starts held whole, was that
/// run's peak).
pub const SEGMENT_POINTS: usize = 1 << 20;

/// Windows of look-ahead a segment waits for past its last anchor: the neighbour windows
/// after a window reach `t0 + (NEIGHBOUR_WINDOWS + 1)·W`, and one more keeps the edge of
/// the last one inside the points held.
const LOOK_AHEAD_WINDOWS: usize = NEIGHBOUR_WINDOWS + 2;

/// The burst search of one hop over its retry starts pushed in [`RetryPoint::order`], a
/// segment of time at a time, so that what it holds does not grow with the hop's retry
/// starts: the points of the segment, the [`NEIGHBOUR_WINDOWS`] windows before it, the
/// look-ahead after it, and the points of a burst still open (one that a later window may
/// yet join).
///
/// Every distinct start instant `t` anchors a window `[t, t + W]`. A window holding retries
/// of at least `min_ops` operations is significant when its retry count is below
/// [`BURST_P_VALUE`] under Poisson(λ), λ being the busier side's background (see
/// [`Edges::before`] and [`Edges::after`]). Each significant window is narrowed to its least likely sub-window that
/// still holds `min_ops` operations ([`narrow`]), and narrowed windows that overlap or lie
/// within W of each other make one burst.
///
/// The answer is the one search over all points at once gives, whatever the segments: the
/// scan's state (the window's end, the neighbour edges, the reach of the narrowed windows)
/// carries over from one segment to the next; every table a window consults covers its
/// neighbourhood; and a burst is finished only once no later window can join it.
pub struct BurstFinder {
    hop: u16,
    params: BurstParams,
    segment: usize,
    /// From how many anchors a search scans in stretches, and in how many.
    stretches: (usize, usize),
    /// Whether the stretches after the first test their windows (always, but in a test of
    /// the candidates the search tests itself).
    stretches_test: bool,
    /// The points from the hop's `base`-th on.
    points: Vec<RetryPoint>,
    base: usize,
    /// The first point not anchored yet (an index into `points`).
    next: usize,
    /// The anchors of the segment waiting are the instants before this time.
    cut: Option<Millis>,
    /// The end of the last window (an index into `points`) and its neighbours' edges.
    end: usize,
    edges: Edges,
    /// The narrowed window reaching furthest so far, in the hop's indexes: a later window
    /// inside it can only narrow to a part of it, which changes no burst, so it is not
    /// tested at all.
    reach: Option<(usize, usize)>,
    /// The fewest retries a window needs to be a burst at all ([`least_significant_count`]).
    least_count: usize,
    /// Narrowed windows of bursts a later window may still join, in the hop's indexes.
    open: Vec<Narrowed>,
    bursts: Vec<Burst>,
}

impl BurstFinder {
    pub fn new(hop: u16, params: BurstParams) -> BurstFinder {
        BurstFinder::with_segment(hop, params, SEGMENT_POINTS)
    }

    fn with_segment(hop: u16, params: BurstParams, segment: usize) -> BurstFinder {
        BurstFinder {
            hop,
            params,
            segment,
            stretches: (PARALLEL_ANCHORS, rayon::current_num_threads().max(1)),
            stretches_test: true,
            points: Vec::new(),
            base: 0,
            next: 0,
            cut: None,
            end: 0,
            edges: Edges::default(),
            reach: None,
            least_count: least_significant_count(),
            open: Vec::new(),
            bursts: Vec::new(),
        }
    }

    /// Adds the next retry start, never before the one added before it.
    pub fn push(&mut self, point: RetryPoint) {
        debug_assert!(self.points.last().is_none_or(|p| p.order(&point).is_le()));
        self.points.push(point);
        match self.cut {
            None if self.points.len() - self.next > self.segment => {
                self.cut = Some(point.start_ms);
            }
            Some(cut)
                if point.start_ms > cut + LOOK_AHEAD_WINDOWS as f64 * self.params.window_ms =>
            {
                self.search(Some(cut));
                self.cut = None;
            }
            _ => {}
        }
    }

    /// The bursts, in time order.
    pub fn finish(mut self) -> Vec<Burst> {
        self.search(None);
        self.bursts
    }

    /// Anchors a window at every instant not anchored yet before `cut` (at every one when
    /// `None`: all points are in), finishes the bursts no later window can join, and lets
    /// go of the points no later window looks at.
    fn search(&mut self, cut: Option<Millis>) {
        let w = self.params.window_ms;
        let points = &self.points;
        let n = points.len();
        let times: Vec<Millis> = points.iter().map(|p| p.start_ms).collect();
        let instants = Instants::new(&times);
        let need = first_end_with_ops(points, self.params.min_ops);
        let first = instants
            .starts
            .partition_point(|&s| (s as usize) < self.next);
        let last = cut.map_or(instants.starts.len(), |cut| {
            instants
                .starts
                .partition_point(|&s| times[s as usize] < cut)
        });
        // Counts asked about are of points within one window: the table goes that far, not
        // to n.
        let ln_factorial = LnFactorial::up_to(instants.most_in_a_window(&times, w, first..last));
        let scan = Scan {
            times: &times,
            instants: &instants,
            need: &need,
            ln_factorial: &ln_factorial,
            w,
            base: self.base,
            least_count: self.least_count,
            threshold: BURST_P_VALUE.ln(),
        };
        // The anchors in stretches side by side, each from a cursor of its own; the first
        // goes on from this search's cursor and with its reach.
        // No anchors when the cut falls at the next instant (the loop over them was empty).
        let anchors = last.saturating_sub(first);
        let (from_anchors, most) = self.stretches;
        let stretches = if anchors >= from_anchors.max(1) {
            most.clamp(1, anchors)
        } else {
            1
        };
        let bounds: Vec<usize> = (0..=stretches)
            .map(|k| first + anchors * k / stretches)
            .collect();
        let mut cursors: Vec<Cursor> = bounds[..stretches]
            .iter()
            .enumerate()
            .map(|(k, &g)| match k {
                0 => Cursor {
                    end: self.end,
                    edges: std::mem::take(&mut self.edges),
                },
                _ => scan.cursor_at(g),
            })
            .collect();
        let (reach, test) = (self.reach, self.stretches_test);
        let found: Vec<Vec<Candidate>> = cursors
            .par_iter_mut()
            .enumerate()
            .map(|(k, cursor)| {
                let from_reach = if k == 0 { reach } else { None };
                scan.stretch(bounds[k]..bounds[k + 1], cursor, from_reach, k == 0 || test)
            })
            .collect();
        // Which candidates the search takes, in anchor order: a window inside the reach of
        // one taken before it is not (see `reach`), and one a stretch left to a reach of its
        // own that the search's does not cover is tested now.
        for c in found.into_iter().flatten() {
            if self
                .reach
                .is_some_and(|(from, to)| from <= c.hop_i && c.hop_end <= to)
            {
                continue;
            }
            let taken = c.narrowed.or_else(|| {
                let mut cursor = scan.cursor_at(c.g);
                scan.narrowed(c.g, c.hop_end - self.base, &mut cursor.edges)
            });
            if let Some(narrowed) = taken {
                self.open.push(narrowed);
                if self
                    .reach
                    .is_none_or(|(_, reach_to)| narrowed.to > reach_to)
                {
                    self.reach = Some((narrowed.from, narrowed.to));
                }
            }
        }
        let cursor = cursors.pop().expect("one stretch at least");
        self.end = cursor.end;
        self.edges = cursor.edges;
        self.next = instants.starts.get(last).map_or(n, |&s| s as usize);

        // Narrowed windows that overlap or lie within W of each other make one burst, in
        // order of (from, to); a stable sort keeps equal ones in the order they were found,
        // as one search over all points would have them.
        self.open.sort_by_key(|s| (s.from, s.to));
        let local = |at: usize| at - self.base;
        let mut merged: Vec<(Narrowed, usize)> = Vec::new();
        for (k, s) in self.open.iter().enumerate() {
            let joins = merged
                .last()
                .is_some_and(|(m, _)| times[local(s.from)] - times[local(m.to) - 1] <= w);
            match merged.last_mut() {
                Some((m, _)) if joins => {
                    m.to = m.to.max(s.to);
                    if s.ln_p < m.ln_p {
                        m.ln_p = s.ln_p;
                        m.background = s.background;
                    }
                }
                _ => merged.push((*s, k)),
            }
        }
        // A window anchored later starts at or after the next instant: a burst ending more
        // than W before it is finished. Bursts end in order, so the finished ones come first.
        let next_time = times.get(self.next).copied();
        let finished = merged
            .partition_point(|(m, _)| next_time.is_none_or(|t| t - times[local(m.to) - 1] > w));
        let still_open = merged.get(finished).map_or(self.open.len(), |&(_, k)| k);
        for &(m, _) in &merged[..finished] {
            let of = &points[local(m.from)..local(m.to)];
            self.bursts.push(burst_of(self.hop, of, m));
        }
        self.open.drain(..still_open);

        // What later windows look at: the neighbour windows before the next anchor, and
        // the points of the bursts still open.
        let Some(next_time) = next_time else {
            return;
        };
        let look_back = next_time - NEIGHBOUR_WINDOWS as f64 * w;
        let mut keep = times.partition_point(|&t| t < look_back).min(self.next);
        if let Some(open) = self.open.first() {
            keep = keep.min(local(open.from));
        }
        self.points.drain(..keep);
        self.base += keep;
        self.next -= keep;
        self.end = self.end.saturating_sub(keep);
        self.edges.rebase(keep);
    }
}

/// Anchors past which one search scans its windows in stretches side by side: the busiest
/// hop holds most of a run's retry starts, and its search alone kept one core busy while
/// the other, done with the other hops, waited.
const PARALLEL_ANCHORS: usize = 1 << 15;

/// What the windows of one search look at, the same for every anchor (read only, so that
/// stretches of anchors are scanned side by side).
struct Scan<'a> {
    times: &'a [Millis],
    instants: &'a Instants,
    need: &'a [u32],
    ln_factorial: &'a LnFactorial,
    w: Millis,
    /// The hop's index of the first point.
    base: usize,
    least_count: usize,
    threshold: f64,
}

/// Where a scan of anchors in order stands: the end of the last window and its
/// neighbours' edges, each moving only forward.
#[derive(Default)]
struct Cursor {
    end: usize,
    edges: Edges,
}

/// A window a stretch's scan found significant (`narrowed`), or left out as inside the
/// reach of a window before it in the stretch (`None`): whether the search takes it
/// depends on the windows taken before it in every stretch.
struct Candidate {
    g: usize,
    hop_i: usize,
    hop_end: usize,
    narrowed: Option<Narrowed>,
}

impl Scan<'_> {
    /// A cursor standing at anchor `g`, as a scan from the first anchor would reach it.
    fn cursor_at(&self, g: usize) -> Cursor {
        let t0 = self.times[self.instants.starts[g] as usize];
        let (times, w) = (self.times, self.w);
        let mut edges = Edges::default();
        for (k, edge) in edges.before.iter_mut().enumerate() {
            *edge = times.partition_point(|&t| t < t0 - k as f64 * w);
        }
        for (k, edge) in edges.after.iter_mut().enumerate() {
            *edge = times.partition_point(|&t| t <= t0 + k as f64 * w);
        }
        Cursor {
            end: self.instants.end_of(g).max(edges.after[1]),
            edges,
        }
    }

    /// The candidates of the anchors `anchors`, scanned in order from `cursor` with the
    /// reach `reach` of the windows before them; without `test`, every window that holds
    /// enough retries and operations is a candidate left to the search to test.
    fn stretch(
        &self,
        anchors: Range<usize>,
        cursor: &mut Cursor,
        mut reach: Option<(usize, usize)>,
        test: bool,
    ) -> Vec<Candidate> {
        let (times, n) = (self.times, self.times.len());
        let mut found = Vec::new();
        for g in anchors {
            let i = self.instants.starts[g] as usize;
            let t0 = times[i];
            cursor.end = cursor.end.max(self.instants.end_of(g));
            while cursor.end < n && times[cursor.end] <= t0 + self.w {
                cursor.end += 1;
            }
            let end = cursor.end;
            // Most windows hold too few retries (or operations) to be unlikely under any
            // background: their neighbours are not counted at all (the edges catch up at
            // the next window that is, as they only move forward).
            if self.need[i] as usize > end || end - i < self.least_count {
                continue;
            }
            let (hop_i, hop_end) = (self.base + i, self.base + end);
            let narrowed =
                if !test || reach.is_some_and(|(from, to)| from <= hop_i && hop_end <= to) {
                    None
                } else {
                    match self.narrowed(g, end, &mut cursor.edges) {
                        Some(narrowed) => {
                            if reach.is_none_or(|(_, reach_to)| narrowed.to > reach_to) {
                                reach = Some((narrowed.from, narrowed.to));
                            }
                            Some(narrowed)
                        }
                        None => continue,
                    }
                };
            found.push(Candidate {
                g,
                hop_i,
                hop_end,
                narrowed,
            });
        }
        found
    }

    /// The window anchored at `g` and ending at point `end`, narrowed, when it is
    /// significant; `edges` stand at or before its neighbours' edges.
    fn narrowed(&self, g: usize, end: usize, edges: &mut Edges) -> Option<Narrowed> {
        let (times, w, threshold) = (self.times, self.w, self.threshold);
        let i = self.instants.starts[g] as usize;
        let t0 = times[i];
        // The background is the busier side's: a count the side after makes likely is
        // likely whatever the side before says (the tail only grows with the
        // background), and most windows of a busy hop are. Their side before is not
        // counted (its edges catch up at the next window that needs them).
        let k = (end - i) as u64;
        let after = edges.after(times, t0, w);
        ln_tail_below(k, after, threshold, self.ln_factorial)?;
        let lambda = after.max(edges.before(times, t0, w));
        let significant = ln_tail_below(k, lambda, threshold, self.ln_factorial)
            .is_some_and(|ln_p| ln_p < threshold);
        if !significant {
            return None;
        }
        let window = Window {
            first_instant: g,
            last_instant: self.instants.index_of_group_ending_at(end),
            rate_per_ms: lambda / w,
            // A sub-window is at least as wide as the clock resolution, but never wider
            // than the window: the whole window then scores at most its own p-value.
            min_width_ms: TIME_RESOLUTION_MS.min(w),
        };
        let (from, to, ln_p) = narrow(&window, times, self.instants, self.need, self.ln_factorial);
        Some(Narrowed {
            from: self.base + from,
            to: self.base + to,
            ln_p,
            background: lambda,
        })
    }
}

fn burst_of(hop: u16, points: &[RetryPoint], m: Narrowed) -> Burst {
    let mut ops: Vec<u32> = points.iter().map(|p| p.op).collect();
    ops.sort_unstable();
    ops.dedup();
    let delays = points.iter().filter_map(RetryPoint::delay_ms);
    Burst {
        hop,
        start_ms: points[0].start_ms,
        width_ms: points[points.len() - 1].start_ms - points[0].start_ms,
        retries: points.len(),
        ops,
        expected_retries: m.background,
        p_value: m.ln_p.exp(),
        delay_min_ms: delays.clone().reduce(Millis::min),
        delay_max_ms: delays.reduce(Millis::max),
    }
}

/// The distinct start instants of sorted times: `starts[g]` is the first point at the
/// g-th instant. A window never splits the retries of one instant. Point indexes are
/// `u32` here and in [`first_end_with_ops`]: half the memory of `usize` at the largest
/// hop, which the merge holds whole.
struct Instants {
    starts: Vec<u32>,
    n: usize,
}

impl Instants {
    fn new(times: &[Millis]) -> Instants {
        let starts = (0..times.len())
            .filter(|&i| i == 0 || times[i] != times[i - 1])
            .map(|i| i as u32)
            .collect();
        Instants {
            starts,
            n: times.len(),
        }
    }

    /// One past the last point of instant `g`.
    fn end_of(&self, g: usize) -> usize {
        self.starts.get(g + 1).map_or(self.n, |&s| s as usize)
    }

    /// The instant whose points end at `end` (which is an instant boundary).
    fn index_of_group_ending_at(&self, end: usize) -> usize {
        self.starts.partition_point(|&s| (s as usize) < end) - 1
    }

    /// The most points any window `[t, t + w]` anchored at one of the `anchors` instants
    /// holds: the largest count a window or its sub-windows can be tested with.
    fn most_in_a_window(&self, times: &[Millis], w: Millis, anchors: Range<usize>) -> usize {
        let mut end = 0;
        let mut most = 0;
        for g in anchors {
            let i = self.starts[g] as usize;
            end = end.max(self.end_of(g));
            while end < self.n && times[end] <= times[i] + w {
                end += 1;
            }
            most = most.max(end - i);
        }
        most
    }
}

/// For each point `a`, the smallest `b` such that points `[a, b)` belong to at least
/// `min_ops` distinct operations (`u32::MAX` when none does): one two-pointer pass, so
/// that "holds `min_ops` operations" is one comparison for any window.
fn first_end_with_ops(points: &[RetryPoint], min_ops: usize) -> Vec<u32> {
    // Keyed by merge indexes, not by anything a log's writer chooses: a fast fixed hash
    // (std's SipHash, three a point, costs more than the counting).
    let mut counts: HashMap<u32, u32, foldhash::fast::FixedState> = HashMap::default();
    let mut need = vec![u32::MAX; points.len()];
    let mut b = 0;
    for a in 0..points.len() {
        while counts.len() < min_ops && b < points.len() {
            *counts.entry(points[b].op).or_default() += 1;
            b += 1;
        }
        if counts.len() >= min_ops {
            need[a] = b as u32;
        }
        let op = points[a].op;
        let c = counts
            .get_mut(&op)
            .expect("counted when its point was added");
        *c -= 1;
        if *c == 0 {
            counts.remove(&op);
        }
    }
    need
}

/// The edges of the neighbour windows of the last window asked about, as indexes into the
/// sorted times: `before[k]`, the first time at or after `t0 − k·w`; `after[k]`, the first
/// after `t0 + k·w`. Windows are asked about in order of `t0`, so each edge only moves
/// forward: all of them cross the times once in all, not a binary search per edge and
/// window (40 per window).
#[derive(Default)]
struct Edges {
    before: [usize; NEIGHBOUR_WINDOWS + 1],
    after: [usize; NEIGHBOUR_WINDOWS + 2],
}

impl Edges {
    /// The edges after the first `dropped` points were let go of. An edge before them can
    /// only have been a `before` edge of a window whose look-back reached further than any
    /// later window's, or one left behind while its side was not asked about: a later
    /// call moves it past them anyway.
    fn rebase(&mut self, dropped: usize) {
        for edge in self.before.iter_mut().chain(self.after.iter_mut()) {
            *edge = edge.saturating_sub(dropped);
        }
    }

    // The background λ of a window `[t0, t0 + w]`: on each side, the median count of the
    // NEIGHBOUR_WINDOWS windows of width `w`, at least MIN_BACKGROUND_RETRIES; then the
    // busier side (`before(…).max(after(…))`, the search asking the side after first).
    // The median makes one busy neighbour (the other half of a split wave, a stray
    // cluster) no background; the busier side keeps the edge of a long jittered wave,
    // quiet on one side and busy on the other, from looking like a spike. Each side's
    // `t0` must not be below the one of its previous call.

    /// The side before's background: its windows `[t0 − (k+1)w, t0 − kw)`.
    fn before(&mut self, times: &[Millis], t0: Millis, w: Millis) -> f64 {
        // Each edge is where `partition_point` would put it: the predicates only widen as
        // `t0` grows (a rounded `t0 ± k·w` never decreases with `t0`).
        for (k, edge) in self.before.iter_mut().enumerate() {
            let bound = t0 - k as f64 * w;
            while *edge < times.len() && times[*edge] < bound {
                *edge += 1;
            }
        }
        debug_assert_eq!(
            self.before[NEIGHBOUR_WINDOWS],
            times.partition_point(|&t| t < t0 - NEIGHBOUR_WINDOWS as f64 * w)
        );
        let counts = std::array::from_fn(|k| self.before[k] - self.before[k + 1]);
        median(counts).max(MIN_BACKGROUND_RETRIES)
    }

    /// The side after's background: its windows `(t0 + (k+1)w, t0 + (k+2)w]`.
    fn after(&mut self, times: &[Millis], t0: Millis, w: Millis) -> f64 {
        for (k, edge) in self.after.iter_mut().enumerate() {
            let bound = t0 + k as f64 * w;
            while *edge < times.len() && times[*edge] <= bound {
                *edge += 1;
            }
        }
        let counts = std::array::from_fn(|k| self.after[k + 2] - self.after[k + 1]);
        median(counts).max(MIN_BACKGROUND_RETRIES)
    }
}

/// The fewest retries in one window that can be a burst: a smaller count is not unlikely
/// enough ([`BURST_P_VALUE`]) even at the least background a window can have
/// ([`MIN_BACKGROUND_RETRIES`]), and a larger background only makes it likelier.
fn least_significant_count() -> usize {
    let threshold = BURST_P_VALUE.ln();
    (1..)
        .find(|&k| ln_poisson_tail(k, MIN_BACKGROUND_RETRIES) < threshold)
        .expect("a large enough count is unlikely under any finite background") as usize
}

fn median(mut counts: [usize; NEIGHBOUR_WINDOWS]) -> f64 {
    counts.sort_unstable();
    let mid = NEIGHBOUR_WINDOWS / 2;
    if NEIGHBOUR_WINDOWS % 2 == 1 {
        counts[mid] as f64
    } else {
        (counts[mid - 1] + counts[mid]) as f64 / 2.0
    }
}

/// A significant window to narrow: its instants `first_instant..=last_instant`, the
/// background rate, and the width below which a sub-window counts as this wide.
struct Window {
    first_instant: usize,
    last_instant: usize,
    rate_per_ms: f64,
    min_width_ms: Millis,
}

/// The sub-window `[from, to)` of a significant window that is least likely by chance and
/// still holds `min_ops` operations, with its log p-value. A sub-window runs from one
/// instant to another; its expected count is the background rate times its width (at
/// least [`TIME_RESOLUTION_MS`]). Ties prefer more retries, then the narrower one. The
/// whole window always qualifies, so there is always an answer.
fn narrow(
    window: &Window,
    times: &[Millis],
    instants: &Instants,
    need: &[u32],
    ln_factorial: &LnFactorial,
) -> (usize, usize, f64) {
    let count = window.last_instant - window.first_instant + 1;
    let picks = count.min(NARROW_INSTANTS);
    let pick = |j: usize| {
        if picks == 1 {
            window.first_instant
        } else {
            window.first_instant + j * (count - 1) / (picks - 1)
        }
    };
    let mut best: Option<(usize, usize, f64)> = None;
    for s in 0..picks {
        let from = instants.starts[pick(s)] as usize;
        for e in s..picks {
            let to = instants.end_of(pick(e));
            if to < need[from] as usize {
                continue;
            }
            let k = (to - from) as u64;
            let width = (times[to - 1] - times[from]).max(window.min_width_ms);
            let mu = window.rate_per_ms * width;
            // Only a sub-window at least as unlikely as the best so far can win; the first
            // to beat is the significance threshold, which the whole window meets.
            let bound = best.map_or(BURST_P_VALUE.ln(), |b| b.2);
            let Some(ln_p) = ln_tail_below(k, mu, bound, ln_factorial) else {
                continue;
            };
            let better = best.is_none_or(|(bf, bt, bp)| {
                ln_p < bp
                    || (ln_p == bp
                        && (to - from > bt - bf
                            || (to - from == bt - bf
                                && times[to - 1] - times[from] < times[bt - 1] - times[bf])))
            });
            if better {
                best = Some((from, to, ln_p));
            }
        }
    }
    // The whole window is among the sub-windows tried, holds `min_ops` operations and is
    // significant, so something was found.
    best.expect("a significant window qualifies as its own sub-window")
}

/// `ln n!` for every n up to a bound, summed once: the Poisson terms then cost O(1).
struct LnFactorial(Vec<f64>);

impl LnFactorial {
    fn up_to(n: usize) -> LnFactorial {
        let mut table = Vec::with_capacity(n + 1);
        let mut sum = 0.0;
        table.push(0.0);
        for i in 1..=n {
            sum += (i as f64).ln();
            table.push(sum);
        }
        LnFactorial(table)
    }

    fn get(&self, n: u64) -> f64 {
        self.0
            .get(n as usize)
            .copied()
            .unwrap_or_else(|| ln_factorial(n))
    }
}

/// `ln P(X ≥ k)` for X ~ Poisson(μ) when it is at most `bound` (ties included), else
/// `None`, for a `bound` below ln(1/3). Computed only as far as needed: `P(X = k)` alone is
/// a lower bound of the tail, so when it is already above `bound` (or k is not above μ,
/// where the tail is above 1/3) the sum is never started. Far in the tail, where bursts
/// are, the sum takes a few terms.
fn ln_tail_below(k: u64, mu: f64, bound: f64, ln_factorial: &LnFactorial) -> Option<f64> {
    if k == 0 {
        return (bound >= 0.0).then_some(0.0);
    }
    if (k as f64) <= mu {
        // In the bulk the tail is above 1/3: above every bound this module asks about.
        return None;
    }
    if mu <= 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    let ln_pmf = -mu + k as f64 * mu.ln() - ln_factorial.get(k);
    if ln_pmf > bound {
        return None;
    }
    let ln_p = ln_pmf + tail_series(k, mu).ln();
    (ln_p <= bound).then_some(ln_p)
}

/// `P(X ≥ k) / P(X = k) = 1 + μ/(k+1) + μ²/((k+1)(k+2)) + …` for k > μ: terms shrink at
/// least geometrically, fast far in the tail.
fn tail_series(k: u64, mu: f64) -> f64 {
    let (mut sum, mut term, mut n) = (1.0f64, 1.0f64, k);
    loop {
        n += 1;
        term *= mu / n as f64;
        sum += term;
        if term < sum * 1e-12 {
            return sum;
        }
    }
}

/// ln P(X ≥ k) for X ~ Poisson(λ), in log space so that very unlikely counts compare
/// correctly instead of all underflowing to zero.
pub fn ln_poisson_tail(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    if lambda <= 0.0 {
        return f64::NEG_INFINITY;
    }
    let ln_pmf = |n: u64| -lambda + n as f64 * lambda.ln() - ln_factorial(n);
    if (k as f64) <= lambda {
        // In the bulk: 1 − P(X < k) is accurate enough and the sum is short.
        let below: f64 = (0..k).map(|n| ln_pmf(n).exp()).sum();
        return (1.0 - below).max(f64::MIN_POSITIVE).ln();
    }
    ln_pmf(k) + tail_series(k, lambda).ln()
}

fn ln_factorial(n: u64) -> f64 {
    if n < 2 {
        return 0.0;
    }
    if n < 32 {
        return (2..=n).map(|i| (i as f64).ln()).sum();
    }
    let x = n as f64 + 1.0;
    // Stirling series for ln Γ(x); accurate to ~1e-12 for x ≥ 32.
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x.powi(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: BurstParams = BurstParams {
        window_ms: 50.0,
        min_ops: 5,
    };

    #[test]
    fn a_window_with_fewer_than_the_least_count_is_not_significant_under_any_background() {
        let least = least_significant_count() as u64;
        let threshold = BURST_P_VALUE.ln();
        let table = LnFactorial::up_to(4 * least as usize);
        let significant = |k: u64, mu: f64| {
            ln_tail_below(k, mu, threshold, &table).is_some_and(|ln_p| ln_p < threshold)
        };
        assert!(significant(least, MIN_BACKGROUND_RETRIES));
        for k in 0..least {
            for mu in [1.0, 1.0 + 1e-12, 1.5, 2.0, 3.7, 10.0, 100.0] {
                assert!(!significant(k, MIN_BACKGROUND_RETRIES * mu), "{k} at {mu}");
            }
        }
    }

    /// The bursts at one hop, `points` in [`RetryPoint::order`].
    fn find_bursts(hop: u16, points: &[RetryPoint], params: BurstParams) -> Vec<Burst> {
        let mut finder = BurstFinder::new(hop, params);
        for &point in points {
            finder.push(point);
        }
        finder.finish()
    }

    fn points(times: &[(f64, u32)]) -> Vec<RetryPoint> {
        let mut p: Vec<RetryPoint> = times
            .iter()
            .map(|&(start_ms, op)| RetryPoint::new(start_ms, op, Some(1000.0)))
            .collect();
        p.sort_by(RetryPoint::order);
        p
    }

    /// A deterministic uniform draw in [0, 1).
    fn uniform(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn poisson_tail_matches_known_values() {
        // P(X ≥ 1 | λ = 1) = 1 − e^−1; P(X ≥ 10 | λ = 1) ≈ 1.1142e-7.
        assert!((ln_poisson_tail(1, 1.0).exp() - (1.0 - (-1.0f64).exp())).abs() < 1e-9);
        assert!((ln_poisson_tail(10, 1.0).exp() / 1.1142e-7 - 1.0).abs() < 1e-3);
        assert_eq!(ln_poisson_tail(3, 0.0).exp(), 0.0);
        // Far beyond f64's range in linear space, still ordered in log space.
        assert!(ln_poisson_tail(2000, 1.0) < ln_poisson_tail(1000, 1.0));
    }

    #[test]
    fn the_pruned_tail_agrees_with_the_full_one_where_it_answers() {
        let table = LnFactorial::up_to(5000);
        for (k, mu) in [
            (10u64, 1.0),
            (30, 0.5),
            (40, 12.5),
            (300, 180.0),
            (4000, 2.0),
        ] {
            let full = ln_poisson_tail(k, mu);
            let pruned = ln_tail_below(k, mu, 0.0, &table).expect("far tail");
            assert!((full - pruned).abs() < 1e-9 * full.abs(), "{k} {mu}");
            assert_eq!(ln_tail_below(k, mu, full - 1.0, &table), None);
        }
        assert_eq!(ln_tail_below(5, 8.0, 0.0, &table), None, "bulk");
    }

    #[test]
    fn nine_aligned_retries_against_a_quiet_background_are_no_burst() {
        // The background is at least one retry per window: P(X ≥ 9 | 1) ≈ 1.1e-6.
        let nine: Vec<(f64, u32)> = (0..9).map(|op| (1000.0, op)).collect();
        assert!(find_bursts(0, &points(&nine), PARAMS).is_empty());
        let ten: Vec<(f64, u32)> = (0..10).map(|op| (1000.0, op)).collect();
        let b = find_bursts(0, &points(&ten), PARAMS);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].expected_retries, 1.0);
        // Narrowed to the one instant, 1 ms wide: Poisson(1 × 1/50).
        let narrowed = ln_poisson_tail(10, 0.02).exp();
        assert!(
            (b[0].p_value / narrowed - 1.0).abs() < 1e-9,
            "{}",
            b[0].p_value
        );
    }

    #[test]
    fn a_stray_retry_near_an_aligned_cluster_is_left_out() {
        let mut t: Vec<(f64, u32)> = (0..12).map(|op| (1000.0, op)).collect();
        t.push((985.0, 50));
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].ops, (0..12).collect::<Vec<_>>());
        assert_eq!((b[0].start_ms, b[0].width_ms), (1000.0, 0.0));
    }

    #[test]
    fn aligned_retries_of_many_operations_are_a_burst() {
        let mut t: Vec<(f64, u32)> = (0..12).map(|op| (1000.0, op)).collect();
        t.extend((0..20).map(|i| (i as f64 * 97.0, 100 + i)));
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].ops, (0..12).collect::<Vec<_>>());
        assert_eq!(
            (b[0].delay_min_ms, b[0].delay_max_ms),
            (Some(1000.0), Some(1000.0))
        );
    }

    #[test]
    fn a_wave_arriving_as_two_sub_clusters_is_one_burst_of_all_its_operations() {
        // 10 retries within 25 ms, a 38 ms gap, 20 within 33 ms: each half is one busy
        // window beside the other, which the median ignores; 38 ms < W joins them.
        let mut t: Vec<(f64, u32)> = (0..10)
            .map(|i| (5000.0 + i as f64 * 25.0 / 9.0, i))
            .collect();
        t.extend((0..20).map(|i| (5063.0 + i as f64 * 33.0 / 19.0, 10 + i)));
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].ops, (0..30).collect::<Vec<_>>());
        assert_eq!((b[0].start_ms, b[0].width_ms), (5000.0, 96.0));
    }

    #[test]
    fn narrowed_windows_more_than_a_window_apart_are_two_bursts() {
        let mut t: Vec<(f64, u32)> = (0..12).map(|op| (1000.0, op)).collect();
        t.extend((0..12).map(|op| (1051.0, 20 + op)));
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[1].start_ms - b[0].start_ms, 51.0);
    }

    #[test]
    fn a_jittered_wave_is_no_burst_however_many_operations_it_holds() {
        // 4000 retries spread evenly (full jitter) over 10 s: ~20 per 50 ms window.
        let mut state: u64 = 42;
        let t: Vec<(f64, u32)> = (0..4000)
            .map(|op| (uniform(&mut state) * 10_000.0, op))
            .collect();
        assert!(find_bursts(0, &points(&t), PARAMS).is_empty());
    }

    #[test]
    fn the_sharp_leading_edge_of_a_big_jittered_wave_is_no_burst() {
        // 2000 operations fail at once and retry with full jitter over 2 s: the first
        // windows after the failure are as busy as the side after them.
        let mut state: u64 = 7;
        let t: Vec<(f64, u32)> = (0..2000)
            .map(|op| (10_000.0 + uniform(&mut state) * 2000.0, op))
            .collect();
        assert!(find_bursts(0, &points(&t), PARAMS).is_empty());
    }

    #[test]
    fn one_dense_cluster_of_many_distinct_instants_is_one_burst() {
        // 20 000 retries at distinct instants within 40 ms: every window is significant;
        // the first one narrowed covers the rest.
        let t: Vec<(f64, u32)> = (0..20_000)
            .map(|op| (1000.0 + op as f64 * 0.002, op))
            .collect();
        let b = find_bursts(0, &points(&t), PARAMS);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].retries, 20_000);
    }

    #[test]
    fn retries_of_fewer_operations_than_min_ops_are_no_burst() {
        let t: Vec<(f64, u32)> = (0..400)
            .map(|i| (1000.0 + i as f64 * 0.01, i % 4))
            .collect();
        assert!(find_bursts(0, &points(&t), PARAMS).is_empty());
    }

    /// A hop's retry starts in several shapes at once: a steady background, aligned
    /// clusters (some within a window of each other, some far apart), a long storm of
    /// clusters each within W of the next, jittered waves, and runs of equal instants.
    fn mixed_hop(seed: u64) -> Vec<RetryPoint> {
        let mut state = seed;
        let mut t: Vec<(f64, u32)> = Vec::new();
        let mut op = 0u32;
        let mut next_op = || {
            op += 1;
            op
        };
        for _ in 0..3_000 {
            t.push(((uniform(&mut state) * 60_000.0).floor(), next_op()));
        }
        for _ in 0..25 {
            let at = (uniform(&mut state) * 60_000.0).floor();
            let size = 8 + (uniform(&mut state) * 40.0) as usize;
            for _ in 0..size {
                t.push((at + (uniform(&mut state) * 3.0).floor(), next_op()));
            }
        }
        // A storm: clusters 40 ms apart for two seconds.
        for k in 0..50 {
            for _ in 0..12 {
                t.push((20_000.0 + k as f64 * 40.0, next_op()));
            }
        }
        for _ in 0..6 {
            let at = uniform(&mut state) * 60_000.0;
            for _ in 0..200 {
                t.push((at + uniform(&mut state) * 2_000.0, next_op()));
            }
        }
        // Pairs of clusters 30 ms apart, each its own narrowed window, one burst together:
        // a segment may end between the two.
        for _ in 0..40 {
            let at = (uniform(&mut state) * 60_000.0).floor();
            for gap in [0.0, 30.0] {
                for _ in 0..15 {
                    t.push((at + gap, next_op()));
                }
            }
        }
        // Equal instants of one operation's several retries.
        for _ in 0..20 {
            let (at, o) = ((uniform(&mut state) * 60_000.0).floor(), next_op());
            for _ in 0..5 {
                t.push((at, o));
            }
        }
        points(&t)
    }

    /// The search skips the side before of a window whose count the side after already
    /// makes likely: sound only if the tail answers "not below" for every larger
    /// background too. Backgrounds are medians of counts, steps of a half.
    #[test]
    fn a_count_likely_under_a_background_is_likely_under_every_larger_one() {
        let ln_factorial = LnFactorial::up_to(300);
        let threshold = BURST_P_VALUE.ln();
        let backgrounds: Vec<f64> = (2..=600).map(|h| h as f64 / 2.0).collect();
        for k in 1..=300u64 {
            for (a, &smaller) in backgrounds.iter().enumerate() {
                if ln_tail_below(k, smaller, threshold, &ln_factorial).is_some() {
                    continue;
                }
                for &larger in &backgrounds[a..] {
                    assert!(
                        ln_tail_below(k, larger, threshold, &ln_factorial).is_none(),
                        "{k} retries: likely under {smaller}, unlikely under {larger}"
                    );
                }
            }
        }
    }

    /// Stretches of anchors scanned side by side, each from its own cursor and reach, then
    /// decided in order: the same bursts as one scan, with stretches of one anchor up to
    /// half of them, inside and across segments.
    #[test]
    fn scanning_in_stretches_finds_what_one_scan_finds() {
        for seed in [1, 2, 3] {
            let points = mixed_hop(seed);
            let search = |segment: usize, stretches: (usize, usize), test: bool| {
                let mut f = BurstFinder::with_segment(0, PARAMS, segment);
                f.stretches = stretches;
                f.stretches_test = test;
                points.iter().for_each(|&p| f.push(p));
                f.finish()
            };
            let whole = search(usize::MAX, (usize::MAX, 1), true);
            assert!(whole.len() >= 10, "seed {seed}: the shapes make bursts");
            for stretches in [(1, 2), (1, 3), (1, 7), (1, 64), (1, 100_000), (500, 2)] {
                for segment in [usize::MAX, 1_000, 13] {
                    assert_eq!(
                        search(segment, stretches, true),
                        whole,
                        "seed {seed}, stretches {stretches:?}, segments of {segment}"
                    );
                }
            }
            // The search tests every candidate of the later stretches itself, each from a
            // cursor of its own: as it does those a stretch left to a reach of its own.
            for stretches in [(1, 2), (1, 5)] {
                assert_eq!(
                    search(usize::MAX, stretches, false),
                    whole,
                    "seed {seed}, stretches {stretches:?}, tested by the search"
                );
            }
        }
    }

    #[test]
    fn searching_a_segment_at_a_time_finds_what_one_search_over_all_points_finds() {
        for seed in [1, 2, 3] {
            let points = mixed_hop(seed);
            let whole = {
                let mut f = BurstFinder::with_segment(0, PARAMS, usize::MAX);
                points.iter().for_each(|&p| f.push(p));
                f.finish()
            };
            assert!(whole.len() >= 10, "seed {seed}: the shapes make bursts");
            for segment in [1, 2, 3, 5, 7, 11, 13, 50, 100, 1_000, 4_000] {
                let mut f = BurstFinder::with_segment(0, PARAMS, segment);
                let mut held = 0;
                for &p in &points {
                    f.push(p);
                    held = held.max(f.points.len());
                }
                assert_eq!(f.finish(), whole, "seed {seed}, segments of {segment}");
                if segment <= 100 {
                    // The segments did bound what was held: well under the hop's points.
                    assert!(held < points.len() / 2, "seed {seed}: {held} held");
                }
            }
        }
    }
}

//! The order in which the images of one crash point are explored, and when
//! the point is done: all of its images while they fit the bound; else the
//! images that vary only the pending lines recovery reads (the coverage
//! reduction of the crate documentation); else the sampler's.

use crate::images;
use crate::options::Options;
use std::collections::HashSet;

/// The images of one point in the order they are explored: all of them
/// while they fit the bound; else every combination of prefixes of the
/// lines that some explored image's recovery or checks read (the other
/// lines fully persisted; a line read for the first time widens the set)
/// while those fit the bound; else the sampler's images.
pub(crate) struct Sequence<'a> {
    order: &'a [Vec<u64>],
    lens: Vec<usize>,
    raw: images::Plan,
    bound: u64,
    seed: u64,
    point: u64,
    /// Lines that matter, in the order found.
    relevant: Vec<usize>,
    /// Next combination over `relevant` to try.
    cursor: u64,
    tried: HashSet<Vec<usize>>,
    /// Image number at which sampling began.
    sampled_from: Option<u64>,
    next: u64,
    /// [`Options::full_sample`]: sample after a complete enumeration too.
    full_sample: bool,
    /// Image number at which the enumeration over the read lines completed
    /// (with `full_sample`, sampling follows).
    pub(crate) enumerated_at: Option<u64>,
}

impl<'a> Sequence<'a> {
    /// The images of point `point`, whose lines hold `order[i]` pending
    /// stores (their trace positions, oldest first), under `plan`.
    pub(crate) fn new(order: &'a [Vec<u64>], plan: images::Plan, opts: &Options, point: u64) -> Sequence<'a> {
        Sequence {
            order,
            lens: order.iter().map(Vec::len).collect(),
            raw: plan,
            bound: opts.bound,
            seed: opts.seed,
            point,
            relevant: Vec::new(),
            cursor: 0,
            tried: HashSet::new(),
            sampled_from: None,
            next: 0,
            full_sample: opts.full_sample,
            enumerated_at: None,
        }
    }

    /// Starts at image `k` (a replay of one image of an exhaustive point).
    pub(crate) fn start_at(&mut self, k: u64) {
        self.next = k;
    }

    /// The next image to explore (its number, and what it keeps), or `None`
    /// with whether every recovery-visible state was explored.
    pub(crate) fn next(&mut self) -> Result<(u64, Vec<usize>), bool> {
        let k = self.next;
        let keep = if self.raw.exhaustive {
            if k >= self.raw.images {
                return Err(true);
            }
            images::choose(self.order, self.raw, self.seed, self.point, k)
        } else {
            loop {
                if let Some(s0) = self.sampled_from {
                    let j = k - s0;
                    if j >= self.bound {
                        return Err(self.enumerated_at.is_some());
                    }
                    let plan = images::Plan { images: self.bound, exhaustive: false };
                    break images::choose(self.order, plan, self.seed, self.point, j);
                }
                let radix: Vec<u64> = self.relevant.iter().map(|&i| self.lens[i] as u64 + 1).collect();
                let product = radix.iter().try_fold(1u64, |a, &r| a.checked_mul(r)).filter(|&p| p <= self.bound);
                let Some(product) = product else {
                    self.sampled_from = Some(k);
                    continue;
                };
                if self.cursor >= product {
                    if !self.full_sample {
                        return Err(true);
                    }
                    self.enumerated_at = Some(k);
                    self.sampled_from = Some(k);
                    continue;
                }
                let mut keep = self.lens.clone();
                let mut rest = self.cursor;
                for (&i, &r) in self.relevant.iter().zip(&radix) {
                    keep[i] = (rest % r) as usize;
                    rest /= r;
                }
                self.cursor += 1;
                if self.tried.insert(keep.clone()) {
                    break keep;
                }
            }
        };
        self.next += 1;
        Ok((k, keep))
    }

    /// What an explored image read: a pending line read for the first time
    /// widens the combinations (which start over, skipping those tried).
    pub(crate) fn saw(&mut self, read: &[bool]) {
        for (i, &r) in read.iter().enumerate() {
            if r && !self.relevant.contains(&i) {
                self.relevant.push(i);
                self.cursor = 0;
            }
        }
    }
}

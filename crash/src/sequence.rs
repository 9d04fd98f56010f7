//! The order in which the images of one crash point are explored, and when
//! the point is done: all of its images while they fit the bound; else the
//! images that vary only the pending lines recovery reads (the coverage
//! reduction of the crate documentation); else the sampler's.

use crate::images::{self, keep_of, Keep, Lines};
use crate::options::Options;
use std::collections::HashSet;

/// The images of one point in the order they are explored: all of them
/// while they fit the bound; else every combination of prefixes of the
/// lines that some explored image's recovery or checks read (the other
/// lines fully persisted; a line read for the first time widens the set)
/// while those fit the bound; else the sampler's images.
pub(crate) struct Sequence<'a> {
    lines: &'a Lines,
    lens: Vec<usize>,
    raw: images::Plan,
    bound: u64,
    /// Images sampled beyond the bound ([`Options::sampled`]).
    samples: u64,
    seed: u64,
    point: u64,
    /// Lines that matter, in the order found, and the same as a set.
    relevant: Vec<usize>,
    is_relevant: Vec<bool>,
    /// Next combination over `relevant` to try.
    cursor: u64,
    tried: HashSet<Keep>,
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
    /// The images of point `point`, whose pending stores are `lines`, under `plan`.
    pub(crate) fn new(lines: &'a Lines, plan: images::Plan, opts: &Options, point: u64) -> Sequence<'a> {
        Sequence {
            lines,
            lens: lines.lens(),
            raw: plan,
            bound: opts.bound,
            samples: opts.sampled(),
            seed: opts.seed,
            point,
            relevant: Vec::new(),
            is_relevant: vec![false; lines.len()],
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

    /// The next image to explore (its number, and what it leaves out), or
    /// `Err` with whether every recovery-visible state was explored.
    pub(crate) fn next(&mut self) -> Result<(u64, Keep), bool> {
        let k = self.next;
        let keep = if self.raw.exhaustive {
            if k >= self.raw.images {
                return Err(true);
            }
            keep_of(self.lines, &images::choose(self.lines, self.raw, self.seed, self.point, k))
        } else {
            self.reduced_or_sampled(k)?
        };
        self.next += 1;
        Ok((k, keep))
    }

    /// Image `k` of a point beyond the bound: the next untried combination
    /// over the relevant lines while those fit the bound, else a sample.
    fn reduced_or_sampled(&mut self, k: u64) -> Result<Keep, bool> {
        loop {
            if let Some(s0) = self.sampled_from {
                let j = k - s0;
                if j >= self.samples {
                    return Err(self.enumerated_at.is_some());
                }
                let plan = images::Plan { images: self.samples, exhaustive: false };
                return Ok(keep_of(self.lines, &images::choose(self.lines, plan, self.seed, self.point, j)));
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
            let mut keep: Keep = Vec::new();
            let mut rest = self.cursor;
            for (&i, &r) in self.relevant.iter().zip(&radix) {
                let d = (rest % r) as usize;
                rest /= r;
                if d < self.lens[i] {
                    keep.push((i, d));
                }
            }
            keep.sort_unstable();
            self.cursor += 1;
            if self.tried.insert(keep.clone()) {
                return Ok(keep);
            }
        }
    }

    /// The pending lines an explored image read: one read for the first
    /// time widens the combinations (which start over, skipping those tried).
    pub(crate) fn saw(&mut self, read: &[usize]) {
        for &i in read {
            if !self.is_relevant[i] {
                self.is_relevant[i] = true;
                self.relevant.push(i);
                self.cursor = 0;
            }
        }
    }
}

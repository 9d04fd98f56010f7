//! Which PM images a crash point has, and how they are numbered.
//!
//! At a crash point, every line with not-yet-durable stores keeps some prefix
//! of them (see [`crate::persist`]). With lines `L1 < L2 < … < Lm` (by offset)
//! holding `n1 … nm` pending stores there are `Π (ni + 1)` images.
//!
//! * **Exhaustive** while that product is at most the bound (default 1024):
//!   image `k` keeps, of line `Li`, the `di`-th prefix where `d1 d2 … dm` are
//!   the digits of `k` in the mixed radix `(n1+1) … (nm+1)`, `L1` least
//!   significant. Image 0 persists nothing pending, the last one everything.
//! * **Sampled** beyond it: `bound` images, image `k` chosen by a generator
//!   seeded with `(seed, point, k)`, so any one image is rebuilt alone:
//!   `k = 0` everything persisted; `k = 1` nothing; then in turn
//!   random per-line prefixes; *accumulative* (the pending stores in trace
//!   order up to a random cut persist, the rest do not, as PMDK pmreorder's
//!   accumulative engine); *reverse* (the lines whose latest pending store
//!   comes after a random cut persist entirely, the others not at all: the
//!   most recent work survives, older does not); all-or-nothing per line.

/// The pending stores of a crash point: per line with any, by offset, its
/// store pieces oldest first (piece numbers grow in trace order).
#[derive(Clone, Debug, Default)]
pub struct Lines {
    /// The lines' offsets.
    pub offsets: Vec<u64>,
    /// Where each line's pieces start in `pieces` (one more than the lines).
    start: Vec<u32>,
    pieces: Vec<u32>,
}

impl Lines {
    /// The pending stores `lines` gives: (offset, pieces oldest first) by offset.
    pub fn of<'a, P: IntoIterator<Item = &'a u32>>(lines: impl IntoIterator<Item = (u64, P)>) -> Lines {
        let mut l = Lines { start: vec![0], ..Lines::default() };
        for (off, pieces) in lines {
            l.offsets.push(off);
            l.pieces.extend(pieces);
            l.start.push(l.pieces.len() as u32);
        }
        l
    }

    /// These lines with those of `changed` (offsets, sorted) replaced by
    /// what `now` says they hold (`None`: no pending store any more): the
    /// pending stores of the next crash point, in time proportional to the
    /// lines rather than to lookups of each.
    pub fn updated<'a, P: IntoIterator<Item = &'a u32>>(
        &self,
        changed: &[u64],
        mut now: impl FnMut(u64) -> Option<P>,
    ) -> Lines {
        let mut l = Lines {
            offsets: Vec::with_capacity(self.len() + changed.len()),
            start: Vec::with_capacity(self.len() + changed.len() + 1),
            pieces: Vec::with_capacity(self.pieces.len()),
        };
        l.start.push(0);
        let push = |l: &mut Lines, off: u64, pieces: &mut dyn Iterator<Item = u32>| {
            l.offsets.push(off);
            l.pieces.extend(pieces);
            l.start.push(l.pieces.len() as u32);
        };
        let (mut i, mut j) = (0, 0);
        while i < self.len() || j < changed.len() {
            let old = self.offsets.get(i).copied().unwrap_or(u64::MAX);
            let new = changed.get(j).copied().unwrap_or(u64::MAX);
            if new <= old {
                if let Some(p) = now(new) {
                    push(&mut l, new, &mut p.into_iter().copied());
                }
                j += 1;
                i += (new == old) as usize;
            } else {
                push(&mut l, old, &mut self.pieces(i).iter().copied());
                i += 1;
            }
        }
        l
    }

    /// How many lines.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The pieces of line `i`, oldest first.
    pub fn pieces(&self, i: usize) -> &[u32] {
        &self.pieces[self.start[i] as usize..self.start[i + 1] as usize]
    }

    /// The pending stores of each line.
    pub fn lens(&self) -> Vec<usize> {
        self.start.windows(2).map(|w| (w[1] - w[0]) as usize).collect()
    }
}

/// An image as what it leaves out: `(line, kept)` for every line that keeps
/// fewer than all of its pending stores (`kept` of them), by line. The
/// empty list is the image that persists everything.
pub type Keep = Vec<(usize, usize)>;

/// The [`Keep`] of an image that keeps `kept[i]` stores of line `i`.
pub fn keep_of(lines: &Lines, kept: &[usize]) -> Keep {
    kept.iter().enumerate().filter(|&(i, &d)| d < lines.pieces(i).len()).map(|(i, &d)| (i, d)).collect()
}

/// Images of a point: how many, and whether they are all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub images: u64,
    pub exhaustive: bool,
}

/// The images of a point whose lines have `lens` pending stores.
pub fn plan(lens: &[usize], bound: u64) -> Plan {
    let mut total: u64 = 1;
    for &n in lens {
        total = total.saturating_mul(n as u64 + 1);
        if total > bound {
            return Plan { images: bound, exhaustive: false };
        }
    }
    Plan { images: total, exhaustive: true }
}

/// splitmix64: small, fast and good enough to pick images reproducibly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, point: u64, image: u64) -> Rng {
        let mut r = Rng(seed ^ point.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ image.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// How many pending stores of each line of `lines` image `k` keeps (the
/// sampler's order-based strategies read the stores' trace order).
pub fn choose(lines: &Lines, plan: Plan, seed: u64, point: u64, k: u64) -> Vec<usize> {
    let lens = lines.lens();
    if plan.exhaustive {
        let mut rest = k;
        return lens
            .iter()
            .map(|&n| {
                let d = rest % (n as u64 + 1);
                rest /= n as u64 + 1;
                d as usize
            })
            .collect();
    }
    match k {
        0 => return lens,
        1 => return vec![0; lens.len()],
        _ => {}
    }
    let mut rng = Rng::new(seed, point, k);
    let (lo, hi) = lines.pieces.iter().fold((u64::MAX, 0), |(a, b), &x| (a.min(x as u64), b.max(x as u64)));
    let cut = lo + rng.below(hi - lo + 1);
    let each = |i: usize| lines.pieces(i).iter().map(|&x| x as u64);
    match k % 4 {
        2 => lens.iter().map(|&n| rng.below(n as u64 + 1) as usize).collect(),
        3 => (0..lines.len()).map(|i| each(i).take_while(|&x| x < cut).count()).collect(),
        0 => {
            (0..lines.len()).map(|i| if each(i).next_back().is_some_and(|x| x >= cut) { lens[i] } else { 0 }).collect()
        }
        _ => lens.iter().map(|&n| if rng.next_u64() & 1 == 1 { n } else { 0 }).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_update_by_the_changed_ones() {
        let old = Lines::of([(64, &[1u32][..]), (128, &[2, 3]), (256, &[4])]);
        let now: std::collections::HashMap<u64, Vec<u32>> =
            [(0, vec![9]), (128, vec![3, 7]), (192, vec![8]), (320, vec![10])].into_iter().collect();
        let l = old.updated(&[0, 128, 192, 256, 320], |off| now.get(&off));
        assert_eq!(l.offsets, [0, 64, 128, 192, 320]);
        let all: Vec<&[u32]> = (0..l.len()).map(|i| l.pieces(i)).collect();
        assert_eq!(all, [&[9][..], &[1], &[3, 7], &[8], &[10]]);
        assert_eq!(old.updated(&[], |_| now.get(&0)).offsets, old.offsets);
    }

    #[test]
    fn exhaustive_enumerates_every_prefix_combination_once() {
        let order = Lines::of([(0, &[1, 4][..]), (64, &[2]), (128, &[3, 5, 6])]);
        let p = plan(&[2, 1, 3], 1024);
        assert_eq!(p, Plan { images: 24, exhaustive: true });
        let mut seen = std::collections::HashSet::new();
        for k in 0..p.images {
            let c = choose(&order, p, 0, 0, k);
            assert!(c[0] <= 2 && c[1] <= 1 && c[2] <= 3);
            assert!(seen.insert(c));
        }
        assert_eq!(choose(&order, p, 0, 0, 0), vec![0, 0, 0]);
        assert_eq!(choose(&order, p, 0, 0, 23), vec![2, 1, 3]);
    }

    #[test]
    fn sampler_is_seeded_and_keeps_prefixes() {
        let v: Vec<[u32; 3]> = (0..20).map(|i| [i, i + 20, i + 40]).collect();
        let order = Lines::of(v.iter().enumerate().map(|(i, p)| (64 * i as u64, p)));
        let p = plan(&[3; 20], 1024);
        assert!(!p.exhaustive && p.images == 1024);
        assert_eq!(choose(&order, p, 7, 3, 0), vec![3; 20]);
        assert_eq!(choose(&order, p, 7, 3, 1), vec![0; 20]);
        for k in 2..50 {
            let a = choose(&order, p, 7, 3, k);
            assert_eq!(a, choose(&order, p, 7, 3, k), "same seed, same image");
            assert!(a.iter().all(|&d| d <= 3));
        }
        assert!((2..50).any(|k| choose(&order, p, 7, 3, k) != choose(&order, p, 8, 3, k)), "the seed matters");
    }
}

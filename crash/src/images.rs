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

/// How many pending stores of each line image `k` keeps. `order[i]` lists,
/// per line, the trace positions of its pending stores (oldest first; used
/// by the sampler's order-based strategies).
pub fn choose(order: &[Vec<u64>], plan: Plan, seed: u64, point: u64, k: u64) -> Vec<usize> {
    let lens: Vec<usize> = order.iter().map(Vec::len).collect();
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
    let (lo, hi) = order.iter().flatten().fold((u64::MAX, 0), |(a, b), &x| (a.min(x), b.max(x)));
    let cut = lo + rng.below(hi - lo + 1);
    match k % 4 {
        2 => lens.iter().map(|&n| rng.below(n as u64 + 1) as usize).collect(),
        3 => order.iter().map(|o| o.iter().take_while(|&&x| x < cut).count()).collect(),
        0 => order.iter().map(|o| if o.last().is_some_and(|&x| x >= cut) { o.len() } else { 0 }).collect(),
        _ => lens.iter().map(|&n| if rng.next_u64() & 1 == 1 { n } else { 0 }).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustive_enumerates_every_prefix_combination_once() {
        let order = vec![vec![1, 4], vec![2], vec![3, 5, 6]];
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
        let order: Vec<Vec<u64>> = (0..20).map(|i| vec![i, i + 20, i + 40]).collect();
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

//! The workloads' random numbers: xorshift64* seeded through splitmix64.
//!
//! Workloads need repeatable randomness (the same seed and thread count give
//! the same allocation sequence, hence the same trace), cheap enough not to
//! show up next to an allocator call, and no dependency: quality beyond
//! "no visible pattern in sizes and victims" does not matter here.

/// The splitmix64 finalizer: spreads a counter or a seed over all 64 bits.
/// Also the hash the object checksums are built from.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A xorshift64* generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `stream` (e.g. a thread id) of run seed `seed`: distinct
    /// streams of one seed are unrelated, and seed 0 is as good as any.
    pub fn new(seed: u64, stream: u64) -> Rng {
        // xorshift must not start at 0; mix() of anything is 0 only for one input.
        Rng(mix(seed ^ mix(stream.wrapping_add(0x5157))) | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift: no division on the hot
    /// path, and the bias (below 2^-32 for the `n` used here) is irrelevant.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    #[inline]
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A Poisson variate of mean `lambda` (Knuth's product of uniforms: fine
    /// for the small means the workloads use, O(lambda) per draw).
    pub fn poisson(&mut self, lambda: f64) -> u64 {
        let limit = (-lambda).exp();
        let mut k = 0;
        let mut p = self.unit();
        while p > limit {
            k += 1;
            p *= self.unit();
        }
        k
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeatable_and_streams_differ() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7, 0);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7, 0);
                move |_| r.next_u64()
            })
            .collect();
        let c: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7, 1);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn ranges_and_poisson_mean() {
        let mut r = Rng::new(1, 2);
        for _ in 0..10_000 {
            let x = r.range(64, 256);
            assert!((64..=256).contains(&x));
        }
        let n = 20_000;
        let mean = (0..n).map(|_| r.poisson(7.5) as f64).sum::<f64>() / n as f64;
        assert!((mean - 7.5).abs() < 0.2, "mean {mean}");
        let mut v: Vec<u32> = (0..100).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        assert_ne!(v, s);
    }
}

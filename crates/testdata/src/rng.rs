//! The one random source of every generator in this crate.

/// SplitMix64: tiny, fast, and good enough to vary test data. The generators own it, so no
/// external crate or platform detail can change a benchmark's input between runs or
/// machines: the seed fixes every byte.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`; the modulo bias is irrelevant for test data.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A number in `lo..=hi`; `lo`, without drawing, when that holds one number or none (a
    /// definition's bounds can meet).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below((hi - lo).saturating_add(1))
    }

    /// True one time in `n`.
    pub(crate) fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// True `percent` times in a hundred.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub(crate) fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        // invariant: every table passed here is a non-empty constant.
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_one_sequence() {
        let draw = |seed| {
            let mut r = Rng::new(seed);
            (0..4).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }

    #[test]
    fn ranges_stay_inside_their_bounds() {
        let mut r = Rng::new(3);
        for _ in 0..1000 {
            assert!((5..=9).contains(&r.range(5, 9)));
            assert!(r.below(7) < 7);
        }
        assert_eq!(r.range(4, 4), 4);
        assert_eq!(r.range(4, 2), 4);
        // The whole range: its size does not fit a u64, and must not overflow.
        r.range(0, u64::MAX);
    }
}

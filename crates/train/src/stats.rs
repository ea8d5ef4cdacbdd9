//! Order statistics, one definition for the whole project: estimators, benches and the riders'
//! delay histogram all read quantiles the same way.
//!
//! A quantile is interpolated linearly between the two closest ranks (Hyndman & Fan type 7,
//! numpy's default): over `n` sorted values the `q` quantile sits at position `h = q (n − 1)`,
//! and between `v[⌊h⌋]` and `v[⌈h⌉]` in proportion to `h − ⌊h⌋`. So on even-length input the
//! median is the mean of the two middle values, `q = 0` is the minimum and `q = 1` the maximum.

/// Where the `q` quantile of `n` sorted values sits: the two ranks (0-based) it lies between and
/// the weight of the upper one. `None` for no values or `q` outside `[0, 1]` (or NaN).
pub fn rank(q: f64, n: usize) -> Option<(usize, usize, f64)> {
    if n == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = q * (n - 1) as f64;
    let lo = (h.floor() as usize).min(n - 1);
    let hi = (h.ceil() as usize).min(n - 1);
    Some((lo, hi, h - lo as f64))
}

/// The `q` quantile of values already sorted ascending; see the module for the definition.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    let (lo, hi, w) = rank(q, sorted.len())?;
    let (a, b) = (sorted[lo], sorted[hi]);
    // Equal neighbours give themselves exactly (no 0 × inf or rounding).
    Some(if lo == hi || a == b {
        a
    } else {
        a + (b - a) * w
    })
}

/// The `q` quantile (0 ≤ q ≤ 1) of `v` in any order; `None` if `v` is empty or `q` is out of
/// range. Sorts a copy.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    quantile_sorted(&s, q)
}

/// The median of `v` (the mean of the two middle values for even lengths); NaN for none.
pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_and_even_medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        // Even length: the mean of the middle two, not either one of them.
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn interpolates_between_ranks() {
        let v = [10.0, 20.0, 30.0, 40.0, 50.0];
        assert_eq!(quantile(&v, 0.0), Some(10.0));
        assert_eq!(quantile(&v, 1.0), Some(50.0));
        assert_eq!(quantile(&v, 0.25), Some(20.0));
        // h = 0.9 × 4 = 3.6: 40 + 0.6 × 10.
        assert!((quantile(&v, 0.9).unwrap() - 46.0).abs() < 1e-9);
        // Two values: the 0.25 quantile is a quarter of the way.
        assert_eq!(quantile(&[0.0, 8.0], 0.25), Some(2.0));
    }

    #[test]
    fn bad_input_is_none_not_a_panic() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[1.0], -0.1), None);
        assert_eq!(quantile(&[1.0], 1.5), None);
        assert_eq!(quantile(&[1.0], f64::NAN), None);
        assert_eq!(rank(0.5, 0), None);
    }

    #[test]
    fn equal_neighbours_and_infinities() {
        assert_eq!(
            quantile(&[f64::INFINITY, f64::INFINITY], 0.5),
            Some(f64::INFINITY)
        );
        assert_eq!(quantile(&[5.0, 5.0, 5.0, 5.0], 0.3), Some(5.0));
    }

    #[test]
    fn rank_positions() {
        assert_eq!(rank(0.5, 4), Some((1, 2, 0.5)));
        assert_eq!(rank(0.5, 5), Some((2, 2, 0.0)));
        assert_eq!(rank(1.0, 3), Some((2, 2, 0.0)));
    }
}

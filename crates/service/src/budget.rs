//! The default probe-byte budget: what one estimate of the method costs at the path's
//! capacity, with room to spare, so a schedule without a configured budget is never cut
//! short by it. The cost is found by running the method's estimator on the fluid bottleneck
//! model (`mgrp_estimate::fluid`) at that capacity, half of it taken by cross traffic, and
//! reading the probe bytes its estimate's quality tuple reports.

use mgrp_estimate::fluid::{drive, FluidPath};
use mgrp_estimate::methods::{Method, MethodError};
use mgrp_estimate::Estimator;
use mgrp_traffic::pattern::CrossPattern;

/// The least default budget a minute (the fixed default before budgets were derived).
pub const FLOOR: u64 = 2_000_000;

/// The capacity assumed while a path's is not measured yet: the first round (which measures
/// it) may then cost what a fast path costs.
pub const UNKNOWN_CAPACITY_BPS: f64 = 1e9;

/// One estimate's bytes times this: a minute's default budget.
const MARGIN: f64 = 2.0;

/// Simulated time one estimate may take at most.
const HORIZON_NS: u64 = 60_000_000_000;

/// Probe bytes one measurement of `method` sends on a path of `capacity_bps` (`None`: not yet
/// measured, so the round the builder makes then is the one that measures it).
pub fn expected_bytes(method: &str, capacity_bps: Option<f64>) -> Result<u64, MethodError> {
    if method == crate::loss::METHOD {
        // badabing's cost does not depend on the path: a full round's probes.
        return Ok(crate::loss::expected_bytes());
    }
    let c = capacity_bps
        .filter(|c| c.is_finite() && *c >= 1e3)
        .unwrap_or(UNKNOWN_CAPACITY_BPS);
    let mut est = Method::from_name(method)?.build(capacity_bps)?;
    // Half the capacity as cross traffic, a 100-packet buffer and 10 ms each way, as the
    // estimators' own tests use. Both are valid for any capacity the filter above lets through.
    let cross = CrossPattern::Cbr {
        rate_bps: (c / 2.0).round() as u64,
        size: 1500,
    };
    let Ok(mut path) = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(cross)) else {
        return Ok(0);
    };
    // What an estimate says it cost (its quality tuple counts every probe byte sent for it).
    let estimates = drive(&mut est, &mut path, HORIZON_NS);
    let cap = est.capacity().map(|e| e.quality.probe_bytes);
    Ok(estimates
        .iter()
        .map(|(_, e)| e.quality.probe_bytes)
        .chain(cap)
        .max()
        .unwrap_or(0))
}

/// The default budget a minute for `method` at `capacity_bps`: [`MARGIN`] estimates' worth,
/// at least [`FLOOR`].
pub fn default_budget(method: &str, capacity_bps: Option<f64>) -> u64 {
    match expected_bytes(method, capacity_bps) {
        Ok(b) => ((b as f64 * MARGIN).ceil() as u64).max(FLOOR),
        // An unknown method (config validation refuses it first; measuring would say so).
        Err(_) => FLOOR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_fits_an_estimate_at_the_capacity() {
        for (m, c) in [
            ("auto", None),
            ("auto", Some(10e6)),
            ("auto", Some(100e6)),
            ("auto", Some(1e9)),
            ("chirp", None),
            ("chirp", Some(10e6)),
            ("chirp", Some(1e9)),
        ] {
            let bytes = expected_bytes(m, c).unwrap();
            let d = default_budget(m, c);
            eprintln!("{m} at {c:?}: {bytes} B, default {d} B/min");
            assert!(bytes > 0, "{m} {c:?}");
            assert!(d >= 2 * bytes && d >= FLOOR, "{m} {c:?}: {d} < 2 x {bytes}");
        }
        // An auto estimate on a fast path costs more than the old fixed 2 MB default.
        assert!(
            expected_bytes("auto", Some(1e9)).unwrap()
                > expected_bytes("auto", Some(10e6)).unwrap()
        );
        assert_eq!(default_budget("magic", Some(1e6)), FLOOR);
    }
}

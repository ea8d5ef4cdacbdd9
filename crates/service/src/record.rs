//! Estimates into store records: the one place a [`Record`] is built from a measurement, so
//! active, passive and scalar records (RTT, loss, a testbed's truth) carry the same fields the
//! same way.

use mgrp_estimate::wren::PassiveEstimate;
use mgrp_estimate::{Estimate, Quality};
use mgrp_store::Record;

/// Where a record's value came from: its series (`path`, `metric`), who measured it
/// (`source`: `active`, `passive`, `tcp_info`, `testbed`) and when (Unix ns).
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    pub path: &'a str,
    pub metric: &'a str,
    pub source: &'a str,
    pub t_ns: u64,
}

/// The record of a value with its range and quality tuple.
pub fn record(
    at: Series<'_>,
    (value, low, high): (f64, f64, f64),
    quality: &Quality,
    final_: bool,
) -> Record {
    Record {
        path: at.path.into(),
        metric: at.metric.into(),
        t_ns: at.t_ns,
        value,
        low,
        high,
        method: quality.method.into(),
        source: at.source.into(),
        probe_bytes: quality.probe_bytes,
        trains: quality.trains,
        confidence: quality.confidence,
        elapsed_s: quality.elapsed_s,
        final_,
        timescale_ms: quality.timescale_ms,
    }
}

/// An estimator's estimate.
pub fn from_estimate(at: Series<'_>, e: &Estimate) -> Record {
    record(
        at,
        (e.value_bps, e.low_bps, e.high_bps),
        &e.quality,
        e.final_,
    )
}

/// A passive (Wren) estimate: its path and time are its own, the flow's and the window's end.
pub fn from_passive(e: &PassiveEstimate) -> Record {
    let path = format!("{}->{}", e.src, e.dst);
    let at = Series {
        path: &path,
        metric: "avail_bw",
        source: "passive",
        t_ns: e.window_end_ns,
    };
    // No train went above the estimate: nothing bounds A from above, and the range says only
    // what was seen.
    let high = e.high_bps.unwrap_or(e.value_bps);
    record(at, (e.value_bps, e.low_bps, high), &e.quality, true)
}

/// A measured quantity that is not an estimator's output (RTT from the kernel, probe loss, a
/// testbed's ground truth): `method` says how it was measured, over `elapsed_s`.
pub fn scalar(
    at: Series<'_>,
    method: &str,
    value: f64,
    range: (f64, f64),
    elapsed_s: f64,
) -> Record {
    let q = Quality {
        method: "",
        elapsed_s,
        probe_bytes: 0,
        trains: 0,
        confidence: 1.0,
        timescale_ms: None,
    };
    // The method may be a schedule's (a `String`), not an estimator's static name.
    let mut r = record(at, (value, range.0, range.1), &q, true);
    r.method = method.into();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Series<'static> {
        Series {
            path: "a->b",
            metric: "avail_bw",
            source: "active",
            t_ns: 7,
        }
    }

    #[test]
    fn an_estimate_keeps_its_quality_tuple() {
        let e = Estimate {
            value_bps: 5e6,
            low_bps: 4e6,
            high_bps: 6e6,
            final_: false,
            quality: Quality {
                method: "chirp",
                elapsed_s: 1.5,
                probe_bytes: 1234,
                trains: 11,
                confidence: 0.8,
                timescale_ms: Some(640.0),
            },
        };
        let r = from_estimate(at(), &e);
        assert_eq!(
            (
                r.path.as_str(),
                r.metric.as_str(),
                r.source.as_str(),
                r.t_ns
            ),
            ("a->b", "avail_bw", "active", 7)
        );
        assert_eq!((r.value, r.low, r.high), (5e6, 4e6, 6e6));
        assert_eq!(
            (r.method.as_str(), r.probe_bytes, r.trains),
            ("chirp", 1234, 11)
        );
        assert_eq!((r.confidence, r.elapsed_s, r.final_), (0.8, 1.5, false));
        assert_eq!(r.timescale_ms, Some(640.0));
    }

    #[test]
    fn a_scalar_is_final_and_free() {
        let r = scalar(at(), "loss", 0.25, (0.2, 0.3), 0.0);
        assert_eq!((r.value, r.low, r.high), (0.25, 0.2, 0.3));
        assert_eq!((r.probe_bytes, r.trains, r.confidence), (0, 0, 1.0));
        assert!(r.final_);
        assert_eq!(r.method, "loss");
    }
}

//! Tracking as a schedule's method (`method = "track"`, the default): one [`Tracker`] lives
//! as long as the schedule, so each round tests whether the last estimate still holds rather
//! than searching again (`mgrp_estimate::track`, docs/tracking.md). The schedule's ceiling
//! (`crate::schedule::Schedule::set_ceiling`) bounds what the rounds spend.

use mgrp_estimate::track::{TrackParams, Tracker};

/// The method's name in configuration files and records.
pub const METHOD: &str = "track";

/// A schedule's tracker for a path of capacity `capacity_bps` (`None`: its first round
/// measures it), at `ceiling` (share of capacity).
pub fn tracker(capacity_bps: Option<f64>, ceiling: f64) -> Result<Tracker, String> {
    Tracker::new(TrackParams {
        capacity_bps,
        ceiling,
        continuous: false,
        ..TrackParams::default()
    })
    .map_err(|e| e.to_string())
}

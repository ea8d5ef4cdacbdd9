//! Tracking as a schedule's method (`method = "track"`, the default): one [`Tracker`] lives
//! as long as the schedule, so each round tests whether the last estimate still holds rather
//! than searching again (`mgrp_estimate::track`, docs/tracking.md). The schedule's ceiling
//! (`crate::schedule::Schedule::set_ceiling`) bounds what the rounds spend.

use mgrp_estimate::track::{TrackParams, Tracker};

/// The method's name in configuration files and records.
pub const METHOD: &str = "track";

/// The share of the schedule's ceiling the tracker paces its rounds to. The schedule's budget
/// (the ceiling over the trailing minute) cuts any round it cannot pay for; a tracker paced at
/// the whole ceiling keeps that minute full, so the re-search after a change was cut or skipped
/// (at 20 Mbit/s, 300 s STEP: a round cut every ~4 s, steps followed in 5.6–8.8 s). Pacing
/// at 80% leaves a fifth of the minute (0.6 MB at 20 Mbit/s) for the search.
pub const PACE_SHARE: f64 = 0.8;

/// A schedule's tracker for a path of capacity `capacity_bps` (`None`: its first round
/// measures it), under `ceiling` (share of capacity; its rounds paced at [`PACE_SHARE`] of it).
pub fn tracker(capacity_bps: Option<f64>, ceiling: f64) -> Result<Tracker, String> {
    if !(ceiling.is_finite() && ceiling > 0.0 && ceiling <= 1.0) {
        return Err(format!(
            "ceiling must be above 0% and at most 100% of capacity, not {ceiling}"
        ));
    }
    Tracker::new(TrackParams {
        capacity_bps,
        ceiling: ceiling * PACE_SHARE,
        continuous: false,
        ..TrackParams::default()
    })
    .map_err(|e| e.to_string())
}

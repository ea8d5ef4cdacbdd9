//! Drive a sans-IO estimator with real trains over a session: the thin I/O layer under
//! `mgrp estimate`.

use crate::client::Session;
use crate::Error;
use mgrp_estimate::{Estimate, Estimator};
use std::time::{Duration, Instant};

/// What the driver reports after each train.
#[derive(Debug, Clone)]
pub struct Progress {
    pub trains: u32,
    pub probe_bytes: u64,
    pub elapsed: Duration,
    pub estimate: Option<Estimate>,
    pub flagged: bool,
}

/// Run `est` until it is done, `deadline` passes or `stop()` says so, calling `progress` after
/// every train. Returns the last estimate.
pub fn run_estimator(
    session: &mut Session,
    est: &mut dyn Estimator,
    deadline: Instant,
    mut stop: impl FnMut() -> bool,
    mut progress: impl FnMut(&Progress),
) -> Result<Option<Estimate>, Error> {
    let t0 = Instant::now();
    let (mut trains, mut bytes) = (0u32, 0u64);
    while !est.is_done() && Instant::now() < deadline && !stop() {
        let now = mgrp_clock::now_ns();
        match est.poll_train(now) {
            Some(req) => {
                let r = session.send_train(&req)?;
                trains += 1;
                bytes += req.bytes();
                let now = mgrp_clock::now_ns();
                est.handle_train(now, &r);
                if !est.is_done() {
                    // Riders wait for the next train rather than leave just before it.
                    session.expect_next_train(est.next_wakeup().unwrap_or(now).max(now));
                }
                progress(&Progress {
                    trains,
                    probe_bytes: bytes,
                    elapsed: t0.elapsed(),
                    estimate: est.estimate(),
                    flagged: r.stats.flagged,
                });
            }
            None => {
                // Sleep until the estimator's next wakeup (in short slices, to see `stop`).
                let wake = est.next_wakeup().unwrap_or(now + 10_000_000);
                let wait = wake.saturating_sub(now).clamp(100_000, 20_000_000);
                std::thread::sleep(Duration::from_nanos(wait));
            }
        }
    }
    Ok(est.estimate())
}

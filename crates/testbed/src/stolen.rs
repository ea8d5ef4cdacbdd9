//! Timing tests on a VM whose host steals CPU. While the hypervisor holds a vCPU off, the
//! shaper drains less, the pacer misses its gaps and the receiver stamps packets in batches:
//! a test of an estimator's accuracy then measures the host. On this kind of machine the host
//! steals in bursts that come and go (2026-11-24: 394 s of steal in an hour and a quarter, a
//! bench of pacing flagging 20 of 20 trains, then 2 of 20 a minute later).
//!
//! So a timing test runs its measurement and its assertions through [`unless_stolen`]: an
//! attempt that fails *while steal was measured* is run again, at most [`ATTEMPTS`] times; a
//! failure on an undisturbed attempt, or on the last one, is the test's failure, with the steal
//! of every attempt printed. Before a re-run it waits (at most a minute) for a quiet stretch.
//! The assertions themselves are not loosened.

use mgrp_clock::steal::{Steal, StealSnapshot};
use std::io::Write;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Straight to stderr, past the test harness's capture: a re-run shows in the log even when
/// the test then passes.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Attempts in all, the first included. A rehearsal on 2026-11-25 needed 3 for a 6 s test
/// (`overload_gives_zero_available_and_counts_drops`: 520, 190, then 210 ms stolen from one CPU),
/// the bursts lasting minutes; one more keeps such a test from failing on the host alone.
pub const ATTEMPTS: u32 = 4;

/// An attempt counts as disturbed when some CPU lost at least this much (two ticks of
/// `/proc/stat`) ...
pub const MIN_STOLEN_S: f64 = 0.02;

/// ... and at least this share of the attempt. A quiet VM of this kind accrues about 0.05% per
/// CPU (7-8 ticks per CPU in 138 s while the workspace built, 2026-11-24 22:39); during the
/// bursts above, about 5% per CPU.
pub const STOLEN_SHARE: f64 = 0.002;

/// Before a re-run, wait at most this long for a quiet stretch: the bursts come and go over
/// minutes, and an attempt run straight into the same burst fails the same way (a rehearsal on
/// 2026-11-25: four attempts of a 6 s test back to back lost 26%, 22%, 7% and 3% of a CPU).
pub const QUIET_WAIT_S: f64 = 60.0;

/// A quiet stretch: this long without a disturbed window (the same rule as an attempt's).
const QUIET_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// Wait until a [`QUIET_WINDOW`] passes undisturbed, at most [`QUIET_WAIT_S`]: (seconds
/// waited, whether it got quiet). Where steal cannot be read, no wait.
fn wait_for_quiet() -> (f64, bool) {
    let start = std::time::Instant::now();
    while start.elapsed().as_secs_f64() < QUIET_WAIT_S {
        let Some(before) = StealSnapshot::take() else {
            return (0.0, true);
        };
        std::thread::sleep(QUIET_WINDOW);
        if before.elapsed().is_none_or(|s| !disturbed(&s)) {
            return (start.elapsed().as_secs_f64(), true);
        }
    }
    (start.elapsed().as_secs_f64(), false)
}

/// An attempt that failed with this much steal is worth another.
fn disturbed(s: &Steal) -> bool {
    s.disturbed(MIN_STOLEN_S, STOLEN_SHARE)
}

/// Run `body` (given the attempt number, from 1) and return what it returns; see the module
/// comment for when a failing attempt is run again. `what` names the test in what is printed.
pub fn unless_stolen<T>(what: &str, mut body: impl FnMut(u32) -> T) -> T {
    for attempt in 1..=ATTEMPTS {
        let before = StealSnapshot::take();
        let outcome = catch_unwind(AssertUnwindSafe(|| body(attempt)));
        let steal: Option<Steal> = before.as_ref().and_then(StealSnapshot::elapsed);
        let said = steal
            .as_ref()
            .map_or("steal unknown".to_string(), Steal::to_string);
        match outcome {
            Ok(v) => {
                if attempt > 1 {
                    say(&format!("{what}: attempt {attempt} passed ({said})"));
                }
                return v;
            }
            Err(panic) => {
                let disturbed = steal.as_ref().is_some_and(disturbed);
                if disturbed && attempt < ATTEMPTS {
                    say(&format!(
                        "{what}: attempt {attempt} failed while the host stole CPU ({said}); \
                         running it again"
                    ));
                    let (waited, quiet) = wait_for_quiet();
                    say(&format!(
                        "{what}: waited {waited:.0} s for the steal to subside ({})",
                        if quiet {
                            "it did"
                        } else {
                            "it did not; running anyway"
                        }
                    ));
                    continue;
                }
                say(&format!(
                    "{what}: attempt {attempt} of {ATTEMPTS} failed ({said}; {})",
                    if disturbed {
                        "disturbed, no attempts left"
                    } else {
                        "not disturbed: the failure stands"
                    }
                ));
                resume_unwind(panic);
            }
        }
    }
    unreachable!("the last attempt returns or resumes its panic")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passing_body_runs_once() {
        let mut runs = 0;
        assert_eq!(
            unless_stolen("t", |a| {
                runs += 1;
                a
            }),
            1
        );
        assert_eq!(runs, 1);
    }

    #[test]
    fn only_a_failure_with_steal_is_run_again() {
        let steal = |ms: &[f64], window_s: f64| Steal {
            window_s,
            stolen_s: ms.iter().map(|m| m / 1e3).collect(),
        };
        // 30 ms of 10 s on one CPU: over both bounds. 10 ms (one tick, which a quiet VM also
        // accrues): not. 20 ms of 60 s on each CPU: under the share (0.03%, a quiet host).
        assert!(disturbed(&steal(&[30.0, 0.0], 10.0)));
        assert!(!disturbed(&steal(&[10.0, 10.0], 1.0)));
        assert!(!disturbed(&steal(&[20.0, 20.0], 60.0)));
        assert!(disturbed(&steal(&[0.0, 200.0], 60.0)));
    }
}

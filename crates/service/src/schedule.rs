//! When a path is measured and how many probe bytes that measurement may spend: a sans-IO
//! state machine (explicit monotonic `now_ns`, no clock, no sockets, no threads). The driver
//! (`driver.rs`) asks [`Schedule::poll`] what to do, runs the measurement, and reports back
//! with [`Schedule::handle_measured`] or [`Schedule::handle_failed`]; it sleeps until
//! [`Schedule::poll_timeout`] or a "measure now" ([`Schedule::handle_wake`]).

use std::collections::VecDeque;

const MINUTE_NS: u64 = 60_000_000_000;

/// Consecutive failures wait `every`, `2 × every`, `4 × every`... up to this (or `every` if
/// longer), so a peer that stays down is not hammered with connection attempts.
pub const MAX_BACKOFF_NS: u64 = 5 * MINUTE_NS;

/// Spends remembered at most; older ones fall out of the minute anyway, and a schedule
/// measures at most every 100 ms (600 a minute).
const SPENT_CAP: usize = 1024;

/// What the driver should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Measure, spending at most `allowance` probe bytes.
    Measure { allowance: u64 },
    /// Due, but the trailing minute's budget is spent: not measured (counted by the driver).
    Skip,
}

/// Why the last round did not give a fresh estimate, if it was the budget's doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetCut {
    /// A measurement was not started: the minute's bytes were spent.
    Skipped,
    /// A measurement stopped before a train the remaining allowance could not pay for.
    Cut,
}

#[derive(Debug, Clone)]
pub struct Schedule {
    every_ns: u64,
    budget: u64,
    /// (when, bytes) of the measurements in the trailing minute, oldest first.
    spent: VecDeque<(u64, u64)>,
    next_ns: u64,
    /// When the current (or last) round started.
    round_ns: u64,
    failures: u32,
    woken: bool,
    budget_cut: Option<BudgetCut>,
    /// Probe bytes a second the path may carry on average (ceiling × capacity), once known.
    ceiling_bytes_per_s: Option<f64>,
    /// The next round's size, when the caller knows it ([`Schedule::expect_next`]).
    next_bytes: Option<u64>,
}

/// The share of the ceiling rounds are paced to. The minute's budget is a whole minute of the
/// ceiling; paced at all of it, the trailing minute stays full and a round larger than the
/// usual (a tracker's re-search after a change) was cut or skipped: at 20 Mbit/s on a 300 s
/// STEP a round was cut every ~4 s and level changes took 5.6–8.8 s to follow. At 80% a fifth of
/// the minute (0.6 MB at 20 Mbit/s, 2% ceiling) stays free for it.
pub const PACE_SHARE: f64 = 0.8;

impl Schedule {
    /// A schedule due at once, then every `every_ns`, within `budget` probe bytes a minute.
    pub fn new(now_ns: u64, every_ns: u64, budget: u64) -> Schedule {
        Schedule {
            every_ns: every_ns.max(1),
            budget,
            spent: VecDeque::new(),
            next_ns: now_ns,
            round_ns: now_ns,
            failures: 0,
            woken: false,
            budget_cut: None,
            ceiling_bytes_per_s: None,
            next_bytes: None,
        }
    }

    /// Hold the probe load at or below `bytes_per_s` (ceiling × capacity; `None`: no ceiling):
    /// the minute's budget is capped at a minute of it, and after each round the next waits
    /// until the round's bytes are paid for at [`PACE_SHARE`] of that rate, whatever `every`
    /// says (a "measure now" waits too). The bound is the minute's: no trailing minute carries
    /// more than a minute of the ceiling. The round before a first ceiling (the one that
    /// measured the capacity) counts in its minute like any other and is not repaid by
    /// waiting: repaid at half rate (each round waiting twice its pay-back until their bytes
    /// added up to it), a narrow re-search early in the first minute was followed by ~23 s
    /// without a round at 20 Mbit/s (`make demo`, 2026-11-27), while the minute's budget
    /// already kept the load within the ceiling.
    pub fn set_ceiling(&mut self, bytes_per_s: Option<f64>) {
        self.ceiling_bytes_per_s = bytes_per_s.filter(|r| r.is_finite() && *r > 0.0);
    }

    pub fn ceiling_bytes_per_s(&self) -> Option<f64> {
        self.ceiling_bytes_per_s
    }

    /// The budget in force: the configured or derived one, capped by a minute at the ceiling.
    fn minute_budget(&self) -> u64 {
        match self.ceiling_bytes_per_s {
            Some(r) => self.budget.min((r * 60.0) as u64),
            None => self.budget,
        }
    }

    /// After a round that ended at `now_ns` having sent `bytes`: no next round before they
    /// are paid for at [`PACE_SHARE`] of the ceiling, or, when the trailing minute is fuller
    /// than that pace keeps it (a large round in it: the acquiring search, a re-search),
    /// before what the minute has left, spread until its oldest spend leaves it, pays for a
    /// typical round (the median of the minute's spends; the large one is already off what is
    /// left). At the pace alone, such a minute was spent in a burst of rounds and the path
    /// then went unwatched until the minute rolled on (`make demo`: no round from 37 s to the
    /// end); spreading by the last round's bytes instead waited 28 s after a 0.5 MB
    /// re-search.
    fn pay_back(&mut self, now_ns: u64, bytes: u64) {
        let Some(r) = self.ceiling_bytes_per_s else {
            return;
        };
        let left = self.minute_budget().saturating_sub(self.used(now_ns));
        let until_room = self
            .spent
            .front()
            .map_or(MINUTE_NS, |(t, _)| (t + MINUTE_NS).saturating_sub(now_ns))
            .max(1_000_000_000);
        let mut sizes: Vec<u64> = self.spent.iter().map(|(_, b)| *b).collect();
        sizes.sort_unstable();
        let typical = sizes
            .get(sizes.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(bytes);
        // The wait that pays for `paced` bytes at the pace and for rounds of `size` out of
        // `left`, spread until the minute has room again (never past that time).
        let wait = |paced: u64, size: u64, left: u64| {
            let paced = (paced as f64 / (r * PACE_SHARE) * 1e9).ceil() as u64;
            let spreading = if left > 0 {
                let secs = size as f64 / (left as f64 / (until_room as f64 / 1e9));
                ((secs * 1e9).ceil() as u64).min(until_room)
            } else {
                until_room
            };
            paced.max(spreading)
        };
        let mut pay = wait(bytes, typical, left);
        if let Some(n) = self.next_bytes.take() {
            // A next round known to be small is paced by its own size, and rounds of its size
            // spread what the minute has left beyond the fifth that pacing keeps free for a
            // re-search (so a change found after them still has room). Never longer.
            let reserve = ((1.0 - PACE_SHARE) * self.minute_budget() as f64) as u64;
            pay = pay.min(wait(n, n, left.saturating_sub(reserve)));
        }
        self.next_ns = self.next_ns.max(self.round_ns.saturating_add(pay));
    }

    /// The round after the one about to be reported will send about `bytes` (a tracker's
    /// phase reading, ~5 kB at 20 Mbit/s; `None`: not known). The wait before it is then paced
    /// by that size, and spreads what the minute has left (less the fifth that pacing keeps
    /// free for a re-search) over rounds of that size: not over rounds like the last (a 0.5 MB
    /// re-search: 12.5 s at 80% of 2% of 20 Mbit/s), nor like the minute's median spend. On
    /// the testbed's 20 Mbit/s on/off (2026-11-29) readings that should come every ~125 ms
    /// waited 12 s after the re-search that started them, then 5–6 s each. Never longer than
    /// without the hint; the minute's bound is the same (no trailing minute carries more than
    /// a minute of the ceiling). Call it before [`Schedule::handle_measured`], which uses it
    /// once.
    pub fn expect_next(&mut self, bytes: Option<u64>) {
        self.next_bytes = bytes;
    }

    /// Change the budget (the default one follows the path's measured capacity).
    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
    }

    pub fn budget(&self) -> u64 {
        self.minute_budget()
    }

    /// Measure at the next poll instead of at the scheduled time (the budget still holds).
    pub fn handle_wake(&mut self) {
        self.woken = true;
    }

    /// When the next measurement is due (monotonic ns); the driver sleeps until then.
    pub fn poll_timeout(&self) -> u64 {
        self.next_ns
    }

    /// What to do at `now_ns`: `None` until due.
    pub fn poll(&mut self, now_ns: u64) -> Option<Action> {
        if now_ns < self.next_ns && (!self.woken || self.ceiling_bytes_per_s.is_some()) {
            return None;
        }
        self.woken = false;
        self.round_ns = now_ns;
        // The next round is timed from this one's start, as a steady rhythm.
        self.next_ns = now_ns.saturating_add(self.every_ns);
        let used = self.used(now_ns);
        let budget = self.minute_budget();
        if used >= budget {
            self.budget_cut = Some(BudgetCut::Skipped);
            return Some(Action::Skip);
        }
        Some(Action::Measure {
            allowance: budget - used,
        })
    }

    /// Probe bytes spent in the minute before `now_ns`.
    pub fn used(&mut self, now_ns: u64) -> u64 {
        while self
            .spent
            .front()
            .is_some_and(|(t, _)| now_ns.saturating_sub(*t) >= MINUTE_NS)
        {
            self.spent.pop_front();
        }
        self.spent.iter().map(|(_, b)| b).sum()
    }

    /// A measurement ended at `now_ns` having sent `bytes`; `cut` if the budget stopped it.
    pub fn handle_measured(&mut self, now_ns: u64, bytes: u64, cut: bool) {
        self.record_spend(now_ns, bytes);
        self.pay_back(now_ns, bytes);
        self.failures = 0;
        self.budget_cut = cut.then_some(BudgetCut::Cut);
    }

    /// Connecting or measuring failed at `now_ns` after sending `bytes`: try again after a
    /// backoff that doubles with each failure in a row.
    pub fn handle_failed(&mut self, now_ns: u64, bytes: u64) {
        self.record_spend(now_ns, bytes);
        self.failures = self.failures.saturating_add(1);
        let cap = MAX_BACKOFF_NS.max(self.every_ns);
        let shift = (self.failures - 1).min(20);
        let wait = self.every_ns.saturating_mul(1 << shift).min(cap);
        // From the round's start, like a success: the first failure keeps the rhythm.
        self.next_ns = self.round_ns.saturating_add(wait);
        self.pay_back(now_ns, bytes);
    }

    /// Start the next round `extra_ns` later than the rhythm and the pay-back say (a tracker's
    /// random wait between phase readings).
    pub fn defer(&mut self, extra_ns: u64) {
        self.next_ns = self.next_ns.saturating_add(extra_ns);
    }

    /// A round was cut before a train of `need` bytes: no next round before the trailing
    /// minute has room for it (rounds due sooner would only be cut again, spending nothing).
    /// A train larger than the whole budget never fits: the rhythm is left as it is.
    pub fn wait_for_room(&mut self, need: u64) {
        let budget = self.minute_budget();
        if need > budget {
            return;
        }
        let mut left: u64 = self.spent.iter().map(|(_, b)| b).sum();
        for (t, b) in &self.spent {
            if left + need <= budget {
                break;
            }
            left -= b;
            // This spend leaves the window a minute after it was made.
            self.next_ns = self.next_ns.max(t.saturating_add(MINUTE_NS));
        }
    }

    /// Whether the last round's estimate is missing because of the budget.
    pub fn budget_cut(&self) -> Option<BudgetCut> {
        self.budget_cut
    }

    /// Failures in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    fn record_spend(&mut self, now_ns: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if self.spent.len() >= SPENT_CAP {
            // Merge the two oldest: the sum stays right, only its age is rounded up.
            if let Some((_, b)) = self.spent.pop_front() {
                if let Some(f) = self.spent.front_mut() {
                    f.1 += b;
                }
            }
        }
        self.spent.push_back((now_ns, bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn due_at_once_then_every_period() {
        let mut s = Schedule::new(100, 10 * S, 1_000_000);
        assert_eq!(s.poll_timeout(), 100);
        assert_eq!(s.poll(99), None);
        assert_eq!(
            s.poll(100),
            Some(Action::Measure {
                allowance: 1_000_000
            })
        );
        assert_eq!(s.poll_timeout(), 100 + 10 * S);
        s.handle_measured(100 + 2 * S, 1000, false);
        assert_eq!(s.poll(5 * S), None);
        assert_eq!(
            s.poll(100 + 10 * S),
            Some(Action::Measure { allowance: 999_000 })
        );
    }

    #[test]
    fn wake_measures_early_and_only_once() {
        let mut s = Schedule::new(0, 60 * S, 1_000_000);
        s.poll(0);
        s.handle_measured(S, 10, false);
        s.handle_wake();
        assert!(matches!(s.poll(2 * S), Some(Action::Measure { .. })));
        assert_eq!(s.poll(3 * S), None, "the bell rings once");
        assert_eq!(s.poll_timeout(), 62 * S);
    }

    #[test]
    fn budget_is_a_trailing_minute() {
        let mut s = Schedule::new(0, S, 10_000);
        assert_eq!(s.poll(0), Some(Action::Measure { allowance: 10_000 }));
        s.handle_measured(S / 2, 6_000, false);
        assert_eq!(s.poll(S), Some(Action::Measure { allowance: 4_000 }));
        s.handle_measured(S + S / 2, 4_000, true);
        assert_eq!(s.budget_cut(), Some(BudgetCut::Cut));
        assert_eq!(s.poll(2 * S), Some(Action::Skip));
        assert_eq!(s.budget_cut(), Some(BudgetCut::Skipped));
        // The first spend leaves the window a minute after it was made.
        assert_eq!(
            s.poll(60 * S + S / 2),
            Some(Action::Measure { allowance: 6_000 })
        );
        s.handle_measured(61 * S, 0, false);
        assert_eq!(
            s.budget_cut(),
            None,
            "a round within budget clears the flag"
        );
        assert_eq!(s.used(61 * S + S / 2), 0);
    }

    #[test]
    fn zero_budget_never_measures() {
        let mut s = Schedule::new(0, S, 0);
        assert_eq!(s.poll(0), Some(Action::Skip));
    }

    #[test]
    fn failures_back_off_and_success_resets() {
        let mut s = Schedule::new(0, 10 * S, 1_000_000);
        let mut t = 0;
        let mut gaps = Vec::new();
        for _ in 0..8 {
            assert!(matches!(s.poll(t), Some(Action::Measure { .. })), "at {t}");
            s.handle_failed(t + S, 0);
            gaps.push((s.poll_timeout() - t) / S);
            t = s.poll_timeout();
        }
        assert_eq!(gaps, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(s.failures(), 8);
        s.poll(t);
        s.handle_measured(t + S, 100, false);
        assert_eq!((s.failures(), s.poll_timeout()), (0, t + 10 * S));
    }

    #[test]
    fn backoff_never_shorter_than_the_period() {
        let mut s = Schedule::new(0, 3600 * S, 1_000_000);
        s.poll(0);
        s.handle_failed(S, 0);
        assert_eq!(s.poll_timeout(), 3600 * S);
        s.poll(3600 * S);
        s.handle_failed(3601 * S, 0);
        assert_eq!(
            s.poll_timeout(),
            7200 * S,
            "capped at the period when it is longer"
        );
    }

    #[test]
    fn spends_are_bounded_and_still_summed() {
        let mut s = Schedule::new(0, 1, u64::MAX);
        for i in 0..5000u64 {
            s.handle_measured(i, 2, false);
        }
        assert!(s.spent.len() <= SPENT_CAP);
        assert_eq!(s.used(5000), 10_000);
    }

    /// After a 1 MB round the next waits for its pay-back (25 s at 80% of 50 kB/s; spread
    /// over the minute: 30 s), unless the caller says the next is a 5 kB round (a tracker's
    /// phase reading): then it comes within the pace of that. The hint is used once and never
    /// lengthens the wait.
    #[test]
    fn a_known_small_next_round_waits_for_its_own_size() {
        let waits = |hint: Option<u64>| {
            let mut s = Schedule::new(0, S / 10, u64::MAX);
            s.set_ceiling(Some(50_000.0));
            s.poll(0);
            s.expect_next(hint);
            s.handle_measured(S / 2, 1_000_000, false);
            let t = s.poll_timeout();
            assert!(matches!(s.poll(t), Some(Action::Measure { .. })));
            // Used once: the round after is paced by what it sent again.
            s.handle_measured(t + S / 100, 500_000, false);
            (t, s.poll_timeout() - t)
        };
        let (unknown, after) = waits(None);
        assert_eq!(unknown, 30 * S);
        // 5 kB at 40 kB/s: 125 ms; the 2 MB left less the fifth of the minute kept for a
        // re-search (0.6 MB), over the 60 s until the spend leaves, pays for 5 kB every 214 ms.
        let (known, after_known) = waits(Some(5_000));
        assert_eq!(known / (S / 1000), 214);
        assert!(
            after >= 12 * S && after_known >= 12 * S,
            "{after} {after_known}"
        );
        assert_eq!(waits(Some(2_000_000)).0, unknown);
    }

    /// A cut round waits until the minute has room for the train it could not pay for.
    #[test]
    fn a_cut_round_waits_for_room() {
        let mut s = Schedule::new(0, S / 4, 100_000);
        s.poll(0);
        s.handle_measured(S, 60_000, false);
        s.poll(2 * S);
        s.handle_measured(3 * S, 30_000, true);
        // 10 kB left; the next train needs 35 kB: the first spend must leave first.
        s.wait_for_room(35_000);
        assert_eq!(s.poll_timeout(), 61 * S);
        assert_eq!(s.poll(60 * S), None);
        assert_eq!(s.poll(61 * S), Some(Action::Measure { allowance: 70_000 }));
        // Room already there, or a train that can never fit: the rhythm stands.
        s.handle_measured(62 * S, 0, true);
        let due = s.poll_timeout();
        s.wait_for_room(1_000);
        s.wait_for_room(200_000);
        assert_eq!(s.poll_timeout(), due);
    }

    /// A ceiling known only after the first round (which measured C): that round counts in
    /// its minute (the allowances after it are a minute of the ceiling less it) and is not
    /// repaid by waiting; the rounds after it are paced at [`PACE_SHARE`] of the ceiling.
    #[test]
    fn the_round_before_the_ceiling_counts_in_its_minute() {
        let rate = 50_000.0;
        let mut s = Schedule::new(0, S / 4, u64::MAX);
        s.poll(0);
        s.handle_measured(S, 300_000, false);
        s.set_ceiling(Some(rate));
        assert_eq!(s.budget(), 3_000_000);
        // The path stays watched: the next round is due at once.
        assert_eq!(s.poll_timeout(), S / 4);
        let mut t = S / 4;
        assert_eq!(
            s.poll(t),
            Some(Action::Measure {
                allowance: 2_700_000
            })
        );
        let mut gaps = Vec::new();
        for _ in 0..4 {
            s.handle_measured(t + S / 20, 100_000, false);
            gaps.push((s.poll_timeout() - t) / (S / 1000));
            t = s.poll_timeout();
            assert!(matches!(s.poll(t), Some(Action::Measure { .. })));
        }
        // 100 kB at 80% of 50 kB/s: 2.5 s from each round's start.
        assert_eq!(gaps, [2500, 2500, 2500, 2500]);
        // A round that spends the minute's rest fills it, and is paced like the others.
        s.handle_measured(t + S, 2_300_000, true);
        assert_eq!(s.used(t + S), 3_000_000);
        assert_eq!(s.poll_timeout(), t + 57_500 * (S / 1000));
    }

    /// The ceiling holds whatever the period and the rounds' sizes: rounds of random size,
    /// due every 100 ms, woken often; at every round's start the bytes of all earlier rounds
    /// are within ceiling × the time since the first (exact), and the minute's budget is a
    /// minute of the ceiling.
    #[test]
    fn ceiling_is_never_exceeded() {
        let rate = 25_000.0; // 2% of 10 Mbit/s, in bytes a second
        let mut s = Schedule::new(0, S / 10, 10_000_000);
        s.set_ceiling(Some(rate));
        assert_eq!(s.budget(), 1_500_000);
        let (mut t, mut total, mut rounds) = (0u64, 0u64, 0);
        let mut x = 12345u64;
        while t < 600 * S {
            if rounds % 3 == 0 {
                s.handle_wake();
            }
            match s.poll(t) {
                Some(Action::Measure { allowance }) => {
                    assert!(
                        total as f64 <= rate * t as f64 / 1e9 + 1.0,
                        "{total} B by {t}"
                    );
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let bytes = (x % 200_000).min(allowance);
                    total += bytes;
                    rounds += 1;
                    s.handle_measured(t + S / 20, bytes, false);
                }
                Some(Action::Skip) => {}
                None => {}
            }
            t += S / 100;
        }
        // Paced at PACE_SHARE of the ceiling: the load sits at that share of it, give or take
        // the last round (at most 200 kB) still being paid for when the run ends.
        let load = total as f64 / 600.0;
        let last = 200_000.0 / 600.0;
        assert!(
            rounds > 100
                && load <= rate
                && load <= PACE_SHARE * rate + last
                && load > PACE_SHARE * rate - last,
            "{rounds} rounds, {load} B/s"
        );
        s.set_ceiling(None);
        assert_eq!(s.budget(), 10_000_000);
    }
}

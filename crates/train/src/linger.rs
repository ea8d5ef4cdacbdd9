//! How long a receiver waits for the stragglers of a train that lost a probe (issue 20,
//! calib6): the agent's report rule, shared with the fluid model so the two cannot drift.
//!
//! A probe lost on a path was dropped by a full queue; a probe still on its way sits in that
//! queue at most its drain time. The probes that did arrive show that time: their one-way
//! delays (receive stamp − send stamp, the clocks' offset included) range over the queueing
//! delay they met, and the probes next to a drop met a full queue. A straggler was sent before
//! the sender's TrainEnd, which crossed the same path no faster than a probe, so it arrives at
//! most about one drain time after the TrainEnd. The receiver therefore waits, past the later
//! of TrainEnd and the last arrival, [`QUEUE_FACTOR`] × the deepest queueing delay seen plus
//! [`MARGIN_NS`], at least [`FLOOR_NS`] (the receiving thread's scheduling delays, reordering)
//! and at most the fixed linger it replaces (300 ms). A train whose probes were all lost shows
//! no delay: it keeps the fixed linger.

/// Times the deepest queueing delay seen: a later straggler may meet a deeper queue than the
/// probes that arrived (a packet-counted queue holding larger packets, a drop between probes
/// that were not next to it).
pub const QUEUE_FACTOR: u64 = 2;
/// Added to the queue's share: reordering and stamp noise.
pub const MARGIN_NS: u64 = 5_000_000;
/// Never shorter: the receiving thread may read a burst of probes late on a busy host.
pub const FLOOR_NS: u64 = 20_000_000;

/// The wait past the later of TrainEnd and the last arrival, for a train whose deepest
/// queueing delay seen was `queue_ns`, capped at `cap_ns` (the fixed linger).
pub fn straggler_wait_ns(queue_ns: u64, cap_ns: u64) -> u64 {
    QUEUE_FACTOR
        .saturating_mul(queue_ns)
        .saturating_add(MARGIN_NS)
        .max(FLOOR_NS)
        .min(cap_ns)
}

/// The wait past the later of TrainEnd and the last arrival for a lossy train whose arrivals'
/// delays are `owd`, on a session whose recent lowest delay is `base` ([`RecentBase`]): the
/// fixed `cap_ns` without evidence of the queue (no arrival, or one with nothing to compare
/// it with), else [`straggler_wait_ns`] of the deepest queueing delay seen.
pub fn wait_ns(owd: &OwdRange, base: Option<i64>, cap_ns: u64) -> u64 {
    let evidence = owd.seen() >= 2 || (owd.seen() == 1 && base.is_some());
    if !evidence {
        return cap_ns;
    }
    straggler_wait_ns(owd.queue_ns(base), cap_ns)
}

/// The lowest one-way delays of a session's last [`BASE_TRAINS`] trains: the path's delay with
/// the emptiest queue seen lately, from which a train's queueing delay is measured (a train
/// sent into a standing queue shows little spread of its own). Few trains, so clock drift
/// between the two hosts stays small against the floor; a clock step only lengthens waits
/// (a base above a train's own lowest delay is not used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentBase {
    mins: std::collections::VecDeque<i64>,
}

/// Trains [`RecentBase`] remembers.
pub const BASE_TRAINS: usize = 8;

impl RecentBase {
    /// A train is done (reported or replaced): keep its lowest delay, if it had one.
    pub fn remember(&mut self, owd: &OwdRange) {
        if let Some(min) = owd.min() {
            if self.mins.len() == BASE_TRAINS {
                self.mins.pop_front();
            }
            self.mins.push_back(min);
        }
    }

    /// The lowest delay of the trains remembered.
    pub fn base(&self) -> Option<i64> {
        self.mins.iter().copied().min()
    }
}

/// The lowest and highest one-way delay of the probes seen (ns, any clock offset). Stamps
/// are whatever the sender wrote: the difference wraps instead of overflowing, so garbage
/// gives a wide range (a long wait, capped), never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OwdRange {
    min: i64,
    max: i64,
    seen: u32,
}

impl OwdRange {
    /// A probe sent at `sent_ns` (sender's stamp) arrived at `rx_ns` (receiver's stamp).
    pub fn add(&mut self, sent_ns: u64, rx_ns: u64) {
        let owd = rx_ns.wrapping_sub(sent_ns) as i64;
        if self.seen == 0 {
            (self.min, self.max) = (owd, owd);
        } else {
            self.min = self.min.min(owd);
            self.max = self.max.max(owd);
        }
        self.seen = self.seen.saturating_add(1);
    }

    /// Probes seen.
    pub fn seen(&self) -> u32 {
        self.seen
    }

    /// The lowest delay seen, if any.
    pub fn min(&self) -> Option<i64> {
        (self.seen > 0).then_some(self.min)
    }

    /// The deepest queueing delay seen, measured from `base` (the lowest delay known on the
    /// path, this train's if lower): ns, 0 if nothing was seen.
    pub fn queue_ns(&self, base: Option<i64>) -> u64 {
        if self.seen == 0 {
            return 0;
        }
        let floor = base.map_or(self.min, |b| b.min(self.min));
        self.max.abs_diff(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_follows_the_queue_between_floor_and_cap() {
        let cap = 300_000_000;
        assert_eq!(straggler_wait_ns(0, cap), FLOOR_NS);
        assert_eq!(straggler_wait_ns(1_000_000, cap), FLOOR_NS);
        // 12 ms of queue (100 MTU packets at 100 Mbit/s): 29 ms.
        assert_eq!(straggler_wait_ns(12_000_000, cap), 29_000_000);
        // 60 ms (at 20 Mbit/s): 125 ms.
        assert_eq!(straggler_wait_ns(60_000_000, cap), 125_000_000);
        assert_eq!(straggler_wait_ns(200_000_000, cap), cap);
        assert_eq!(straggler_wait_ns(u64::MAX, cap), cap);
        // A cap below the floor wins.
        assert_eq!(straggler_wait_ns(0, 5_000_000), 5_000_000);
    }

    #[test]
    fn owd_range_measures_from_the_lowest_delay_known() {
        let mut r = OwdRange::default();
        assert_eq!((r.seen(), r.min(), r.queue_ns(None)), (0, None, 0));
        // Clock offset −1 s: delays are negative, the range is what counts.
        r.add(2_000_000_000, 1_000_000_000 + 10_000_000);
        r.add(2_001_000_000, 1_001_000_000 + 25_000_000);
        assert_eq!(r.seen(), 2);
        assert_eq!(r.queue_ns(None), 15_000_000);
        // An earlier train met an emptier queue: measured from there.
        assert_eq!(r.queue_ns(Some(-1_000_000_000)), 25_000_000);
        // A base above this train's lowest (a clock step) is not trusted over the train.
        assert_eq!(r.queue_ns(Some(0)), 15_000_000);
        // Garbage stamps: a wide range, no panic.
        r.add(u64::MAX, 0);
        r.add(0, u64::MAX);
        assert!(r.queue_ns(None) > 0);
    }

    #[test]
    fn evidence_and_the_recent_base() {
        let cap = 300_000_000;
        let mut base = RecentBase::default();
        let mut one = OwdRange::default();
        one.add(0, 50_000_000);
        // Nothing arrived, or one probe with nothing to compare it with: the fixed wait.
        assert_eq!(wait_ns(&OwdRange::default(), None, cap), cap);
        assert_eq!(wait_ns(&one, base.base(), cap), cap);
        // An earlier train at 1 ms: the one probe met 49 ms of queue.
        let mut quiet = OwdRange::default();
        quiet.add(0, 1_000_000);
        base.remember(&quiet);
        base.remember(&OwdRange::default());
        assert_eq!(base.base(), Some(1_000_000));
        assert_eq!(wait_ns(&one, base.base(), cap), 103_000_000);
        // Only the last BASE_TRAINS trains count.
        for _ in 0..BASE_TRAINS {
            base.remember(&one);
        }
        assert_eq!(base.base(), Some(50_000_000));
        assert_eq!(wait_ns(&one, base.base(), cap), FLOOR_NS);
    }
}

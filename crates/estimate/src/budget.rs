//! A byte budget as a wrapper: the inner estimator runs until its next train would cost more
//! than is left, and is done from then on. The budget holds train by train, not just between
//! measurements.

use crate::{Estimate, Estimator, TrainResult, TrainSpec};

pub struct Budgeted<E> {
    inner: E,
    remaining: u64,
    exhausted: bool,
    /// Probes sent and lost in the trains it passed on (the measurement's probe loss).
    pub probes_sent: u64,
    pub probes_lost: u64,
}

impl<E: Estimator> Budgeted<E> {
    /// `inner` with `allowance` probe bytes (UDP payload) to spend.
    pub fn new(inner: E, allowance: u64) -> Self {
        Budgeted {
            inner,
            remaining: allowance,
            exhausted: false,
            probes_sent: 0,
            probes_lost: 0,
        }
    }

    /// A train was refused: the measurement was cut by the budget.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// Bytes still to spend.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: Estimator> Estimator for Budgeted<E> {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        if self.exhausted {
            return None;
        }
        let t = self.inner.poll_train(now_ns)?;
        if t.bytes() > self.remaining {
            self.exhausted = true;
            return None;
        }
        self.remaining -= t.bytes();
        Some(t)
    }
    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        self.probes_sent += obs.probes.iter().filter(|p| p.sent_ns.is_some()).count() as u64;
        self.probes_lost += obs.lost() as u64;
        self.inner.handle_train(now_ns, obs)
    }
    fn estimate(&self) -> Option<Estimate> {
        self.inner.estimate()
    }
    fn is_done(&self) -> bool {
        self.exhausted || self.inner.is_done()
    }
    fn next_wakeup(&self) -> Option<u64> {
        self.inner.next_wakeup()
    }
    fn capacity(&self) -> Option<Estimate> {
        self.inner.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{CapacityEstimator, CapacityParams};
    use crate::fluid::{drive, FluidPath};

    fn path() -> FluidPath {
        FluidPath::new(20e6, 200_000.0, 5_000_000, None).unwrap()
    }

    #[test]
    fn refuses_the_train_it_cannot_pay_for_and_stops() {
        let p = CapacityParams::default();
        let train = p.probes as u64 * p.size as u64;
        // Room for exactly two trains.
        let mut b = Budgeted::new(CapacityEstimator::new(p), 2 * train + train / 2);
        let mut path = path();
        drive(&mut b, &mut path, 60_000_000_000);
        assert!(b.exhausted() && b.is_done());
        assert_eq!(b.remaining(), train / 2);
        assert_eq!(b.probes_sent, 2 * p.probes as u64);
        assert_eq!(b.probes_lost, 0);
        assert!(b.poll_train(u64::MAX / 2).is_none());
    }

    #[test]
    fn a_budget_that_suffices_changes_nothing() {
        let p = CapacityParams::default();
        let mut free = CapacityEstimator::new(p);
        let mut b = Budgeted::new(CapacityEstimator::new(p), u64::MAX);
        drive(&mut free, &mut path(), 60_000_000_000);
        drive(&mut b, &mut path(), 60_000_000_000);
        assert!(!b.exhausted() && b.is_done());
        assert_eq!(b.estimate(), free.estimate());
    }

    #[test]
    fn wraps_a_borrowed_estimator() {
        let mut inner = CapacityEstimator::new(CapacityParams::default());
        let mut b = Budgeted::new(&mut inner, 0);
        assert!(b.poll_train(0).is_none() && b.exhausted());
        assert!(!inner.is_done());
    }
}

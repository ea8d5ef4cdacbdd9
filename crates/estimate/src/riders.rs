//! Rider-aware estimates (seed 000 §4.5.2). With riders, the host's own packets travel inside
//! the probes instead of beside them, so a probe stream meets less load than it would have:
//! the path looks to have more room by the rate of those packets, and unadjusted estimates read
//! high. The engine counts, per train, the rider bytes that would have crossed the path during
//! the train anyway (`TrainResult::competing_bytes`); this wrapper subtracts their rate.

use crate::{Estimate, Estimator, TrainResult, TrainSpec};

/// Wraps any available-bandwidth estimator; capacity passes through unchanged (dispersion of
/// back-to-back probes does not depend on what their padding holds).
pub struct RiderAware<E> {
    inner: E,
    competing_bits: f64,
    train_ns: f64,
}

impl<E: Estimator> RiderAware<E> {
    pub fn new(inner: E) -> Self {
        RiderAware {
            inner,
            competing_bits: 0.0,
            train_ns: 0.0,
        }
    }

    /// The host's own rate that rode in the probes, averaged over the trains so far (bit/s).
    pub fn competing_bps(&self) -> f64 {
        if self.train_ns > 0.0 {
            self.competing_bits / self.train_ns * 1e9
        } else {
            0.0
        }
    }

    /// The estimate as the inner estimator has it, without the adjustment.
    pub fn uncorrected(&self) -> Option<Estimate> {
        self.inner.estimate()
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }
}

impl<E: Estimator> Estimator for RiderAware<E> {
    fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
        self.inner.poll_train(now_ns)
    }

    fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
        // The train's span on the sender's clock: first to last departure.
        let sent = obs.probes.iter().filter_map(|p| p.sent_ns);
        let (lo, hi) = sent.fold((u64::MAX, 0), |(l, h), t| (l.min(t), h.max(t)));
        if hi > lo {
            self.train_ns += (hi - lo) as f64;
            self.competing_bits += obs.competing_bytes() as f64 * 8.0;
        }
        self.inner.handle_train(now_ns, obs)
    }

    fn estimate(&self) -> Option<Estimate> {
        let mut e = self.inner.estimate()?;
        let c = self.competing_bps();
        if c > 0.0 && e.quality.method != "capacity" {
            e.value_bps = (e.value_bps - c).max(0.0);
            e.low_bps = (e.low_bps - c).max(0.0);
            e.high_bps = (e.high_bps - c).max(e.low_bps);
        }
        Some(e)
    }

    fn is_done(&self) -> bool {
        self.inner.is_done()
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
    use crate::fluid::{drive, FluidPath};
    use crate::slops::{Pace, Slops, SlopsParams};
    use mgrp_traffic::CrossPattern;

    /// Says that the host's own traffic rode in each train at `rate` bit/s.
    struct Riding<E>(E, f64);

    impl<E: Estimator> Estimator for Riding<E> {
        fn poll_train(&mut self, now_ns: u64) -> Option<TrainSpec> {
            self.0.poll_train(now_ns)
        }
        fn handle_train(&mut self, now_ns: u64, obs: &TrainResult) {
            let span = obs
                .probes
                .iter()
                .filter_map(|p| p.sent_ns)
                .max()
                .unwrap_or(0);
            let mut o = obs.clone();
            o.riders = Some(crate::TrainRiderStats {
                competing_bytes: (self.1 * span as f64 / 8e9) as u64,
                ..Default::default()
            });
            self.0.handle_train(now_ns, &o)
        }
        fn estimate(&self) -> Option<Estimate> {
            self.0.estimate()
        }
        fn is_done(&self) -> bool {
            self.0.is_done()
        }
        fn next_wakeup(&self) -> Option<u64> {
            self.0.next_wakeup()
        }
    }

    fn run(cross_mbit: f64, riding_bps: f64) -> (f64, f64) {
        let c = 10e6;
        let pattern = CrossPattern::parse(&format!("cbr:{cross_mbit}mbit,size=200")).unwrap();
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, Some(pattern)).unwrap();
        path.idle_until(1_000_000_000);
        let t0 = path.now_ns();
        let est = RiderAware::new(Slops::new(SlopsParams::for_capacity(c, Pace::Fast)));
        let mut e = Riding(est, riding_bps);
        drive(&mut e, &mut path, t0 + 120_000_000_000);
        let r = e.0;
        (
            r.uncorrected().unwrap().value_bps,
            r.estimate().unwrap().value_bps,
        )
    }

    /// A 10 Mbit/s path whose host sends 3 Mbit/s of its own beside 2 of cross traffic: A is 5.
    /// With the host's packets riding in the probes, the streams meet only the 2 Mbit/s of cross
    /// traffic and read about 8; subtracting the competing riders gives 5 back.
    #[test]
    fn subtracting_competing_riders_recovers_a() {
        let (plain, same) = run(5.0, 0.0);
        assert!((plain - 5e6).abs() < 0.1 * 5e6, "{plain}");
        assert_eq!(plain, same, "no riders, no adjustment");
        let (raw, adjusted) = run(2.0, 3e6);
        assert!(
            raw > 7e6,
            "unadjusted reads the room the riders left: {raw}"
        );
        assert!((adjusted - 5e6).abs() < 0.1 * 5e6, "{adjusted}");
    }
}

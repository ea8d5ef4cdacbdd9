//! TCP-available bandwidth: the throughput a new TCP flow would obtain on the path now (seed
//! 003's quantity, what Netmapper annotates links with). Under elastic (TCP) cross traffic the
//! available bandwidth C − X is near zero, yet a new flow takes a share: only a flow measures
//! that. This is the sans-IO judge of one such flow: the I/O layer runs a bounded bulk TCP
//! flow to the peer agent and feeds it the socket's acknowledged bytes; the judge says when
//! it has seen enough and what the flow obtained.
//!
//! What it measures (chosen here; the seed measures a whole transfer): the goodput a new bulk
//! flow gets **from its 2nd to its 6th second** — past slow start and its overshoot, over a few
//! of the competing flows' congestion epochs. The ground truth is the same quantity for a real
//! flow started in the same conditions, so the judge runs the definition itself:
//! - ignore the flow for `warmup` (2 s), and longer while the socket is still in slow start
//!   (up to 2 × `warmup`): a new flow's share after its first halving is what an application
//!   gets, and two flows' shares take seconds to settle;
//! - then cut time into `bin` slices and take each slice's goodput (acknowledged bytes,
//!   payload rate, as an application sees it);
//! - stop after `min_measure` (4 s) once the last `min_bins` slices agree within `stable`
//!   (max/min − 1), or at `max_time`, or when the flow's byte budget is spent;
//! - value = goodput over the whole measured part (a mean, as an application's transfer sees
//!   it), range = the slices' 10th..90th percentile, widened to hold the value; confidence =
//!   1 − spread/value, clamped to 0..1, where spread = p90 − p10.
//!
//! An earlier rule (measure from the first congestion event, stop as soon as 6 slices of
//! 250 ms agree within 15%, median slice) stopped 2–3 s into the flow, while two CUBIC flows
//! were still settling: 18–47% off a real flow (docs/estimators.md).

use crate::{stats::quantile_sorted, Estimate, Quality};

/// How long and how hard to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpAvailParams {
    /// Longest the flow runs, ns.
    pub max_time_ns: u64,
    /// The flow's start that is not measured, ns (longer while in slow start, up to twice).
    pub warmup_ns: u64,
    /// The measured part lasts at least this long, ns, before it may stop as stable.
    pub min_measure_ns: u64,
    /// Slice of the measured part, ns.
    pub bin_ns: u64,
    /// Slices that must agree before stopping early.
    pub min_bins: usize,
    /// Their max/min − 1 at most.
    pub stable: f64,
    /// Bytes the flow may send.
    pub budget_bytes: u64,
}

impl Default for TcpAvailParams {
    fn default() -> Self {
        TcpAvailParams {
            max_time_ns: 6_000_000_000,
            warmup_ns: 2_000_000_000,
            min_measure_ns: 4_000_000_000,
            bin_ns: 250_000_000,
            min_bins: 6,
            stable: 0.15,
            budget_bytes: 64 << 20,
        }
    }
}

impl TcpAvailParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.bin_ns < 10_000_000 {
            return Err("bin below 10 ms: a slice must hold several RTTs' acks".into());
        }
        if self.max_time_ns > 120_000_000_000 || self.max_time_ns <= self.warmup_ns {
            return Err(format!(
                "max time must exceed the warmup ({} s: the flow's start is not measured) and be at most 120 s",
                self.warmup_ns as f64 / 1e9
            ));
        }
        if self.min_measure_ns > self.max_time_ns {
            return Err("the shortest measured part cannot exceed the max time".into());
        }
        if self.min_bins < 2 || self.min_bins > 1000 {
            return Err("min_bins must be 2..=1000".into());
        }
        if !(self.stable > 0.0 && self.stable < 10.0) {
            return Err("stable must be in (0, 10)".into());
        }
        if self.budget_bytes < 100_000 {
            return Err("a budget below 100 kB cannot leave slow start".into());
        }
        Ok(())
    }
}

/// What the socket says at one moment (from `TCP_INFO`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowSample {
    pub now_ns: u64,
    pub bytes_acked: u64,
    pub slow_start: bool,
}

/// The judge of one flow.
#[derive(Debug, Clone)]
pub struct TcpAvail {
    p: TcpAvailParams,
    start_ns: Option<u64>,
    /// Where the measured part began: (time, bytes acked).
    from: Option<(u64, u64)>,
    /// The current slice's start.
    slice: Option<(u64, u64)>,
    rates: Vec<f64>,
    last: Option<FlowSample>,
    done: Option<&'static str>,
}

impl TcpAvail {
    pub fn new(p: TcpAvailParams) -> TcpAvail {
        TcpAvail {
            p,
            start_ns: None,
            from: None,
            slice: None,
            rates: Vec::new(),
            last: None,
            done: None,
        }
    }

    /// Feed a sample; samples must come in time order (an older one is ignored).
    pub fn handle_sample(&mut self, s: FlowSample) {
        if self.done.is_some() || self.last.is_some_and(|l| s.now_ns < l.now_ns) {
            return;
        }
        let start = *self.start_ns.get_or_insert(s.now_ns);
        self.last = Some(s);
        let age = s.now_ns - start;
        let warm = age >= self.p.warmup_ns && (!s.slow_start || age >= 2 * self.p.warmup_ns);
        if self.from.is_none() && warm {
            self.from = Some((s.now_ns, s.bytes_acked));
            self.slice = Some((s.now_ns, s.bytes_acked));
        }
        if let Some((t0, b0)) = self.slice {
            if s.now_ns >= t0 + self.p.bin_ns {
                let secs = (s.now_ns - t0) as f64 / 1e9;
                self.rates
                    .push(s.bytes_acked.saturating_sub(b0) as f64 * 8.0 / secs);
                self.slice = Some((s.now_ns, s.bytes_acked));
            }
        }
        if self.stable_now() {
            self.done = Some("stable");
        } else if age >= self.p.max_time_ns {
            self.done = Some("max time");
        } else if s.bytes_acked >= self.p.budget_bytes {
            self.done = Some("budget");
        }
    }

    /// The flow ended on its own (the peer closed, a send error): judge what there is.
    pub fn handle_end(&mut self) {
        self.done.get_or_insert("flow ended");
    }

    fn stable_now(&self) -> bool {
        let k = self.p.min_bins;
        let measured = match (self.from, self.last) {
            (Some((t0, _)), Some(l)) => l.now_ns.saturating_sub(t0),
            _ => 0,
        };
        if self.rates.len() < k || measured < self.p.min_measure_ns {
            return false;
        }
        let tail = &self.rates[self.rates.len() - k..];
        let lo = tail.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = tail.iter().cloned().fold(0.0, f64::max);
        lo > 0.0 && hi / lo - 1.0 <= self.p.stable
    }

    /// Stop the flow now? (`Some(why)`)
    pub fn done(&self) -> Option<&'static str> {
        self.done
    }

    /// When the I/O layer should sample next, ns (a slice boundary, or sooner).
    pub fn next_sample_at(&self) -> Option<u64> {
        if self.done.is_some() {
            return None;
        }
        let last = self.last.map_or(0, |l| l.now_ns);
        Some(last + (self.p.bin_ns / 5).max(1_000_000))
    }

    /// What the flow obtained: `None` before one slice was measured.
    pub fn estimate(&self, probe_bytes: u64) -> Option<Estimate> {
        if self.rates.is_empty() {
            return None;
        }
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        let q = |x| quantile_sorted(&r, x);
        let value = self.mean_bps().unwrap_or(q(0.5)?);
        let (low, high) = (q(0.1)?.min(value), q(0.9)?.max(value));
        let elapsed = match (self.start_ns, self.last) {
            (Some(a), Some(l)) => (l.now_ns - a) as f64 / 1e9,
            _ => 0.0,
        };
        let confidence = if value > 0.0 {
            (1.0 - (high - low) / value).clamp(0.0, 1.0)
        } else {
            0.0
        };
        Some(Estimate {
            value_bps: value,
            low_bps: low,
            high_bps: high,
            final_: self.done.is_some(),
            quality: Quality {
                method: "tcp",
                elapsed_s: elapsed,
                probe_bytes,
                trains: 0,
                confidence,
                timescale_ms: None,
            },
        })
    }

    /// Goodput over the whole measured part (not the median of slices), bits/s.
    pub fn mean_bps(&self) -> Option<f64> {
        let (t0, b0) = self.from?;
        let l = self.last?;
        (l.now_ns > t0)
            .then(|| l.bytes_acked.saturating_sub(b0) as f64 * 8.0 / ((l.now_ns - t0) as f64 / 1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow in slow start for `ss_ns` (rate doubling from 1 Mbit/s), then at `rate(t)`.
    fn drive(
        j: &mut TcpAvail,
        ss_ns: u64,
        rate: impl Fn(u64) -> f64,
        until_ns: u64,
    ) -> Option<&'static str> {
        drive_flagged(j, ss_ns, rate, until_ns, |t| t < ss_ns)
    }

    /// As [`drive`], with the socket's slow-start flag given apart from the rate.
    fn drive_flagged(
        j: &mut TcpAvail,
        ss_ns: u64,
        rate: impl Fn(u64) -> f64,
        until_ns: u64,
        slow_start: impl Fn(u64) -> bool,
    ) -> Option<&'static str> {
        let (mut t, mut bytes) = (0u64, 0f64);
        let step = 20_000_000;
        while t <= until_ns {
            j.handle_sample(FlowSample {
                now_ns: t,
                bytes_acked: bytes as u64,
                slow_start: slow_start(t),
            });
            if let Some(why) = j.done() {
                return Some(why);
            }
            let bps = if t < ss_ns {
                1e6 * 2f64.powf(t as f64 / 100e6)
            } else {
                rate(t)
            };
            bytes += bps / 8.0 * step as f64 / 1e9;
            t += step;
        }
        None
    }

    #[test]
    fn steady_share_is_measured_after_slow_start_and_stops_early() {
        let mut j = TcpAvail::new(TcpAvailParams::default());
        let why = drive(&mut j, 600_000_000, |_| 9.5e6, 10_000_000_000);
        assert_eq!(why, Some("stable"));
        let e = j.estimate(0).unwrap();
        assert!((e.value_bps / 9.5e6 - 1.0).abs() < 0.01, "{e:?}");
        assert!(e.low_bps <= e.value_bps && e.value_bps <= e.high_bps);
        assert!(e.quality.confidence > 0.95, "{e:?}");
        // The 2 s warmup + the 4 s shortest measured part, sampled every 20 ms.
        assert!((6.0..6.1).contains(&e.quality.elapsed_s), "{e:?}");
        assert!(e.final_);
    }

    #[test]
    fn a_flow_still_in_slow_start_is_judged_after_the_warmup() {
        let p = TcpAvailParams::default();
        let mut j = TcpAvail::new(p);
        // The socket never leaves slow start (no loss: a window-limited flow on a path with a
        // large buffer), its rate flat at 7 Mbit/s after 0.4 s: measured from twice the
        // warmup on, until the max time (2 s measured, short of the 4 s for a stable stop).
        let why = drive_flagged(&mut j, 400_000_000, |_| 7e6, 20_000_000_000, |_| true);
        assert_eq!(why, Some("max time"));
        let e = j.estimate(0).unwrap();
        assert!((e.value_bps / 7e6 - 1.0).abs() < 0.01, "{e:?}");
        let from = j.from.unwrap().0;
        assert!((4_000_000_000..4_020_000_000).contains(&from), "{from}");
    }

    #[test]
    fn an_unsteady_share_widens_the_range_and_lowers_confidence() {
        let mut j = TcpAvail::new(TcpAvailParams::default());
        // Alternating 4 and 12 Mbit/s every 0.5 s: never stable.
        let why = drive(
            &mut j,
            300_000_000,
            |t| {
                if (t / 500_000_000) % 2 == 0 {
                    4e6
                } else {
                    12e6
                }
            },
            20_000_000_000,
        );
        assert_eq!(why, Some("max time"));
        let e = j.estimate(0).unwrap();
        assert!(e.low_bps < 5e6 && e.high_bps > 11e6, "{e:?}");
        assert!(e.quality.confidence < 0.2, "{e:?}");
        let mean = j.mean_bps().unwrap();
        assert!((mean / 8e6 - 1.0).abs() < 0.1, "{mean}");
    }

    #[test]
    fn the_budget_stops_the_flow_and_bad_params_are_refused() {
        let p = TcpAvailParams {
            budget_bytes: 2_000_000,
            ..Default::default()
        };
        let mut j = TcpAvail::new(p);
        assert_eq!(drive(&mut j, 0, |_| 50e6, 10_000_000_000), Some("budget"));
        let mut j = TcpAvail::new(TcpAvailParams::default());
        assert!(j.estimate(0).is_none(), "nothing measured yet");
        j.handle_end();
        assert_eq!(j.done(), Some("flow ended"));
        for bad in [
            TcpAvailParams {
                bin_ns: 1,
                ..Default::default()
            },
            TcpAvailParams {
                max_time_ns: 1_000_000_000,
                ..Default::default()
            },
            TcpAvailParams {
                min_bins: 1,
                ..Default::default()
            },
            TcpAvailParams {
                stable: f64::NAN,
                ..Default::default()
            },
            TcpAvailParams {
                budget_bytes: 10,
                ..Default::default()
            },
            TcpAvailParams {
                min_measure_ns: 60_000_000_000,
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(TcpAvailParams::default().validate().is_ok());
    }
}

//! Elastic probing (seed 000 §8.3): a train that may carry riders bends to the riders there are,
//! so that its probes are padding only when nothing could fill them.
//!
//! - **Wait (bounded)**: before a train, if what is held plus what the host is expected to send
//!   during the train does not fill the train's padding, wait for more (at most `max_wait`, and
//!   never so long that a held packet would reach its deadline before the train starts).
//! - **Shorten**: probes past the first `min_share` of the train leave only if a rider is waiting
//!   for them; the first that would leave empty ends the train. The train keeps its rate, it is
//!   just shorter (the seed's semi-elastic pathload: 40..100 probes, 100 only with riders).
//!
//! The host's rate to a destination comes from [`ArrivalRate`], fed with every packet the shim
//! reads. Pure decisions on explicit times; the engine does the waiting and the sending.

use std::collections::VecDeque;

/// How elastic trains are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ElasticConfig {
    /// Longest a train waits for riders before it starts.
    pub max_wait_ns: u64,
    /// Share of a train, from its start, that always leaves (1.0: never shortened).
    pub min_share: f64,
}

impl Default for ElasticConfig {
    fn default() -> Self {
        ElasticConfig {
            max_wait_ns: 10_000_000,
            min_share: 0.2,
        }
    }
}

impl ElasticConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_share > 0.0 && self.min_share <= 1.0) {
            return Err(format!(
                "elastic min_share must be in (0, 1], not {}",
                self.min_share
            ));
        }
        if self.max_wait_ns > 1_000_000_000 {
            return Err("elastic max_wait must be at most 1 s".into());
        }
        Ok(())
    }

    /// Probes of an `n`-probe train that leave whatever the riders (at least one).
    pub fn mandatory(&self, n: usize) -> usize {
        ((self.min_share * n as f64).ceil() as usize).clamp(1.min(n), n)
    }
}

/// Arrivals remembered to estimate the host's rate (bounded).
const MAX_ARRIVALS: usize = 512;
/// The rate is measured over at most this much recent time.
const RATE_WINDOW_NS: u64 = 200_000_000;

/// The host's recent rate of packets to one destination (bytes over the last 200 ms).
#[derive(Debug, Default, Clone)]
pub struct ArrivalRate {
    arrivals: VecDeque<(u64, usize)>,
    bytes: usize,
}

impl ArrivalRate {
    pub fn push(&mut self, now_ns: u64, bytes: usize) {
        self.expire(now_ns);
        if self.arrivals.len() == MAX_ARRIVALS {
            if let Some((_, b)) = self.arrivals.pop_front() {
                self.bytes -= b;
            }
        }
        self.arrivals.push_back((now_ns, bytes));
        self.bytes += bytes;
    }

    fn expire(&mut self, now_ns: u64) {
        while let Some((t, b)) = self.arrivals.front().copied() {
            if now_ns.saturating_sub(t) <= RATE_WINDOW_NS {
                break;
            }
            self.arrivals.pop_front();
            self.bytes -= b;
        }
    }

    /// Bytes per second over the window (0 with fewer than two arrivals in it).
    pub fn bytes_per_s(&mut self, now_ns: u64) -> f64 {
        self.expire(now_ns);
        if self.arrivals.len() < 2 {
            return 0.0;
        }
        // Over the full window once it has run that long, so a lull counts.
        let first = self.arrivals.front().map_or(now_ns, |a| a.0);
        let span = now_ns.saturating_sub(first).max(RATE_WINDOW_NS / 4) as f64;
        self.bytes as f64 * 1e9 / span
    }
}

/// What the train about to leave needs and what there is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Supply {
    /// Rider bytes the train's probes can hold (their padding).
    pub padding_bytes: usize,
    /// Of which the mandatory prefix's: it leaves whatever the riders, so what fills it must be
    /// held before it starts (the host sends in bursts: a TCP flow's window every RTT or so).
    pub mandatory_padding_bytes: usize,
    /// Planned time from the train's first probe to its last.
    pub train_ns: u64,
    /// Bytes held for the destination now.
    pub held_bytes: usize,
    /// The host's recent rate to the destination.
    pub host_bytes_per_s: f64,
    /// Deadline of the oldest held packet, if any.
    pub oldest_deadline_ns: Option<u64>,
}

/// Margin between a held packet riding and its deadline.
const DEADLINE_MARGIN_NS: u64 = 1_000_000;

/// Whether the train can start: `None` = now; `Some(t)` = look again at `t` (the caller has been
/// waiting since `waiting_since_ns`).
pub fn start_after(
    cfg: &ElasticConfig,
    now_ns: u64,
    waiting_since_ns: u64,
    s: &Supply,
) -> Option<u64> {
    // Nothing to carry, or nobody sending: waiting gains nothing.
    if s.host_bytes_per_s <= 0.0 || s.padding_bytes == 0 {
        return None;
    }
    let during = s.host_bytes_per_s * s.train_ns as f64 / 1e9;
    let held = s.held_bytes as f64;
    let short =
        (s.padding_bytes as f64 - during - held).max(s.mandatory_padding_bytes as f64 - held);
    if short <= 0.0 {
        return None;
    }
    let limit = waiting_since_ns.saturating_add(cfg.max_wait_ns);
    // Start early enough that what is held rides before the oldest packet's deadline, with a
    // margin: the train's probes carry it at padding / span. Started later (1 ms before the
    // deadline, as before), the rest of a held burst left beside the train at its deadline,
    // a step in the queue mid-stream that read "rising" at 0.9-1.0 (C - X) (testbed: 76-86%
    // of the streams it hit, against 26-28% of the others).
    let carry_ns = (held / s.padding_bytes as f64 * s.train_ns as f64) as u64;
    let limit = s.oldest_deadline_ns.map_or(limit, |d| {
        limit.min(d.saturating_sub(DEADLINE_MARGIN_NS + carry_ns))
    });
    if now_ns >= limit {
        return None;
    }
    let fill_ns = (short / s.host_bytes_per_s * 1e9) as u64;
    Some(
        now_ns
            .saturating_add(fill_ns.clamp(100_000, 1_000_000))
            .min(limit),
    )
}

/// One train's shortening: probes past the mandatory prefix leave only with a rider; the first
/// that would not ends the train.
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticTrain {
    mandatory: usize,
    ended_at: Option<usize>,
}

impl ElasticTrain {
    pub fn new(cfg: &ElasticConfig, n: usize) -> Self {
        ElasticTrain {
            mandatory: cfg.mandatory(n),
            ended_at: None,
        }
    }

    /// A train that is never shortened.
    pub fn rigid() -> Self {
        ElasticTrain {
            mandatory: usize::MAX,
            ended_at: None,
        }
    }

    /// Probe `index` is due; `has_rider` says whether a rider is waiting for it. Whether it
    /// leaves.
    pub fn leaves(&mut self, index: usize, has_rider: bool) -> bool {
        if self.ended_at.is_some() {
            return false;
        }
        if index < self.mandatory || has_rider {
            return true;
        }
        self.ended_at = Some(index);
        false
    }

    /// The probe at which the train was cut short, if it was.
    pub fn ended_at(&self) -> Option<usize> {
        self.ended_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supply(held: usize, rate: f64) -> Supply {
        Supply {
            padding_bytes: 14_000,
            mandatory_padding_bytes: 2_800,
            train_ns: 20_000_000,
            held_bytes: held,
            host_bytes_per_s: rate,
            oldest_deadline_ns: Some(10_000_000),
        }
    }

    #[test]
    fn waits_only_while_riders_fall_short_and_never_past_the_bounds() {
        let cfg = ElasticConfig::default();
        // 4 Mbit/s = 500 kB/s: 10 kB during a 20 ms train; 14 kB of padding wants 4 kB held.
        let rate = 500_000.0;
        assert_eq!(start_after(&cfg, 0, 0, &supply(4_000, rate)), None);
        // Enough over the whole train, not yet for the mandatory prefix.
        let prefix = Supply {
            padding_bytes: 3_000,
            ..supply(1_000, rate)
        };
        assert!(start_after(&cfg, 0, 0, &prefix).is_some());
        let t = start_after(&cfg, 0, 0, &supply(1_000, rate)).expect("waits");
        assert!((100_000..=1_000_000).contains(&t), "{t}");
        // Nobody sending: no wait.
        assert_eq!(start_after(&cfg, 0, 0, &supply(0, 0.0)), None);
        // Bounded by max_wait since the wait began...
        let far = Supply {
            oldest_deadline_ns: None,
            ..supply(0, rate)
        };
        assert_eq!(start_after(&cfg, 10_000_000, 0, &far), None);
        assert!(start_after(&cfg, 9_500_000, 0, &far).unwrap() <= 10_000_000);
        // ...and by the oldest held packet's deadline, less a margin and the time the train
        // takes to carry what is held (1 kB of 14 kB of padding over 20 ms: 1.43 ms).
        assert_eq!(start_after(&cfg, 7_572_000, 0, &supply(1_000, rate)), None);
        assert!(start_after(&cfg, 7_000_000, 0, &supply(1_000, rate)).unwrap() <= 7_572_000);
    }

    /// The testbed's case: a 5000-byte burst held, a 50-probe train of 560 bytes of padding
    /// per probe every 0.5 ms (28 kB over 24.5 ms), a mandatory prefix of 10 probes (5.6 kB)
    /// the burst does not fill. The train waits for more, but starts by the deadline less 1 ms
    /// less the 4.4 ms its probes take to carry the burst, so none of it leaves beside the
    /// train at its deadline; the burst's last byte rides 1 ms before that deadline.
    #[test]
    fn held_riders_are_carried_before_their_deadline() {
        let cfg = ElasticConfig::default();
        let s = Supply {
            padding_bytes: 28_000,
            mandatory_padding_bytes: 5_600,
            train_ns: 24_500_000,
            held_bytes: 5_000,
            host_bytes_per_s: 500_000.0,
            oldest_deadline_ns: Some(10_000_000),
        };
        let carry = 5_000 * 24_500_000 / 28_000;
        let latest = 10_000_000 - 1_000_000 - carry;
        let mut now = 0;
        while let Some(t) = start_after(&cfg, now, 0, &s) {
            assert!(t > now && t <= latest, "{now} -> {t}, latest {latest}");
            now = t;
        }
        assert_eq!(now, latest, "waited as long as the burst allows");
        // The burst rides at padding / span from the start: done 1 ms before the deadline.
        assert_eq!(now + carry, 9_000_000);
    }

    #[test]
    fn shortens_after_the_mandatory_prefix_at_the_first_empty_probe() {
        let cfg = ElasticConfig {
            min_share: 0.4,
            max_wait_ns: 10_000_000,
        };
        let mut t = ElasticTrain::new(&cfg, 100);
        for i in 0..40 {
            assert!(t.leaves(i, false), "mandatory probe {i}");
        }
        assert!(t.leaves(40, true));
        assert!(!t.leaves(41, false), "first empty elastic probe ends it");
        assert!(!t.leaves(42, true), "ended stays ended");
        assert_eq!(t.ended_at(), Some(41));
        let mut r = ElasticTrain::rigid();
        assert!((0..100).all(|i| r.leaves(i, false)));
        assert_eq!(ElasticConfig::default().mandatory(1), 1);
        assert_eq!(ElasticConfig::default().mandatory(0), 0);
    }

    #[test]
    fn bad_configuration_is_refused() {
        for share in [0.0, -0.1, 1.5, f64::NAN] {
            let c = ElasticConfig {
                min_share: share,
                ..ElasticConfig::default()
            };
            assert!(c.validate().is_err(), "{share}");
        }
        assert!(ElasticConfig {
            max_wait_ns: 5_000_000_000,
            ..ElasticConfig::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn arrival_rate_over_the_recent_window() {
        let mut r = ArrivalRate::default();
        assert_eq!(r.bytes_per_s(0), 0.0);
        // 5000 bytes every 10 ms for a second: 500 kB/s.
        for i in 0..100u64 {
            r.push(i * 10_000_000, 5_000);
        }
        let v = r.bytes_per_s(1_000_000_000);
        assert!((v - 500_000.0).abs() < 0.05 * 500_000.0, "{v}");
        // Silence for longer than the window: nothing expected.
        assert_eq!(r.bytes_per_s(2_000_000_000), 0.0);
        // Bounded however fast packets come.
        for i in 0..10_000u64 {
            r.push(3_000_000_000 + i, 100);
        }
        assert!(r.arrivals.len() <= MAX_ARRIVALS);
    }
}

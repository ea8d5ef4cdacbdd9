//! Cross-traffic patterns: their text form (`cbr:5mbit`, `step:1,3,5,6,4,2mbit,every=45s`, ...)
//! and, for the UDP kinds, a deterministic send schedule.
//!
//! Rates count Ethernet frame bits (IP packet + 14-byte header): the unit the `tc` shaper
//! charges, so a generator's configured rate is directly comparable to the bottleneck capacity
//! and to the counters the ground truth reads.

use crate::units::{parse_duration, parse_rate};
use crate::Error;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// Ethernet header bytes the shaper counts on top of the IP packet.
pub const ETH_HLEN: u64 = 14;
/// Largest IP packet on the testbed's links (MTU).
pub const MAX_IP_LEN: u32 = 1500;
/// Smallest IP packet a UDP generator sends: IP + UDP headers + the generator's 16-byte stamp.
pub const MIN_IP_LEN: u32 = 20 + 8 + 16;
/// Default IP packet size of UDP cross traffic (MTU-sized, like bulk traffic on a real path).
pub const DEFAULT_IP_LEN: u32 = 1500;
/// At most this many TCP flows in one pattern.
pub const MAX_TCP_FLOWS: u32 = 64;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CrossPattern {
    /// Constant bit rate: packets of `size` bytes at exactly equal gaps.
    Cbr { rate_bps: u64, size: u32 },
    /// Poisson arrivals (exponential gaps) with mean rate `rate_bps`.
    Poisson { rate_bps: u64, size: u32, seed: u64 },
    /// Bursts at a peak rate for `on`, silence for `off`; mean rate is `rate_bps`.
    /// With `exponential`, on and off lengths are drawn with those means.
    OnOff {
        rate_bps: u64,
        size: u32,
        #[serde(with = "secs")]
        on: Duration,
        #[serde(with = "secs")]
        off: Duration,
        exponential: bool,
        seed: u64,
    },
    /// CBR whose rate changes every `every`, cycling through `rates_bps` (the seeds' STEP).
    Step {
        rates_bps: Vec<u64>,
        #[serde(with = "secs")]
        every: Duration,
        size: u32,
    },
    /// `flows` greedy TCP connections; their rate is whatever congestion control takes.
    TcpBulk { flows: u32, cc: Option<String> },
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

const KINDS: &str = "cbr:RATE, poisson:RATE, onoff:RATE[,on=50ms,off=50ms,dist=fixed|exp], \
                     step:R1,R2,...[,every=45s], tcp:FLOWS[,cc=cubic|bbr] \
                     (UDP kinds also take size=BYTES and seed=N)";

impl CrossPattern {
    pub fn parse(s: &str) -> Result<Self, Error> {
        let bad = |why: String| Error::BadInput(format!("bad cross pattern {s:?}: {why}"));
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| bad(format!("expected KIND:ARGS, one of {KINDS}")))?;
        let mut values = Vec::new();
        let mut opts: Vec<(String, String)> = Vec::new();
        for tok in rest.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match tok.split_once('=') {
                Some((k, v)) => opts.push((k.trim().to_ascii_lowercase(), v.trim().to_string())),
                None => values.push(tok.to_string()),
            }
        }
        let mut take = |key: &str| -> Option<String> {
            let i = opts.iter().position(|(k, _)| k == key)?;
            Some(opts.remove(i).1)
        };
        let size = match take("size") {
            Some(v) => {
                let n: u32 = v
                    .parse()
                    .map_err(|_| bad(format!("size={v} is not a byte count")))?;
                if !(MIN_IP_LEN..=MAX_IP_LEN).contains(&n) {
                    return Err(bad(format!(
                        "size={n}: IP packet size must be {MIN_IP_LEN}..={MAX_IP_LEN} bytes"
                    )));
                }
                n
            }
            None => DEFAULT_IP_LEN,
        };
        let seed = match take("seed") {
            Some(v) => v
                .parse()
                .map_err(|_| bad(format!("seed={v} is not an integer")))?,
            None => 1,
        };
        let one_rate = |values: &[String]| -> Result<u64, Error> {
            match values {
                [r] => parse_rate(r).map_err(|e| bad(e.to_string())),
                _ => Err(bad(format!(
                    "{kind} takes exactly one rate, e.g. {kind}:5mbit"
                ))),
            }
        };
        let pattern = match kind.trim().to_ascii_lowercase().as_str() {
            "cbr" => CrossPattern::Cbr {
                rate_bps: one_rate(&values)?,
                size,
            },
            "poisson" => CrossPattern::Poisson {
                rate_bps: one_rate(&values)?,
                size,
                seed,
            },
            "onoff" => {
                let dur = |v: Option<String>, default: u64| -> Result<Duration, Error> {
                    match v {
                        Some(v) => parse_duration(&v).map_err(|e| bad(e.to_string())),
                        None => Ok(Duration::from_millis(default)),
                    }
                };
                let on = dur(take("on"), 50)?;
                let off = dur(take("off"), 50)?;
                if on < Duration::from_millis(1) {
                    return Err(bad("on= must be at least 1ms".into()));
                }
                let exponential = match take("dist").as_deref() {
                    None | Some("fixed") => false,
                    Some("exp") => true,
                    Some(d) => return Err(bad(format!("dist={d}: use fixed or exp"))),
                };
                CrossPattern::OnOff {
                    rate_bps: one_rate(&values)?,
                    size,
                    on,
                    off,
                    exponential,
                    seed,
                }
            }
            "step" => {
                if values.is_empty() {
                    return Err(bad("step needs rates, e.g. step:1,3,5,6,4,2mbit".into()));
                }
                // A bare number borrows the unit of the next token that has one: 1,3,5mbit.
                let mut rates = Vec::with_capacity(values.len());
                for (i, v) in values.iter().enumerate() {
                    let unit = if v.chars().last().is_some_and(|c| c.is_ascii_digit()) {
                        values[i..]
                            .iter()
                            .find_map(|w| {
                                let u =
                                    w.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
                                (!u.is_empty()).then_some(u)
                            })
                            .unwrap_or("")
                    } else {
                        ""
                    };
                    rates.push(parse_rate(&format!("{v}{unit}")).map_err(|e| bad(e.to_string()))?);
                }
                let every = match take("every") {
                    Some(v) => parse_duration(&v).map_err(|e| bad(e.to_string()))?,
                    None => Duration::from_secs(45),
                };
                if every < Duration::from_millis(10) {
                    return Err(bad("every= must be at least 10ms".into()));
                }
                CrossPattern::Step {
                    rates_bps: rates,
                    every,
                    size,
                }
            }
            "tcp" => {
                let flows = match values.as_slice() {
                    [] => 1,
                    [n] => n
                        .parse()
                        .map_err(|_| bad(format!("{n} is not a flow count")))?,
                    _ => return Err(bad("tcp takes one flow count, e.g. tcp:4".into())),
                };
                if !(1..=MAX_TCP_FLOWS).contains(&flows) {
                    return Err(bad(format!("flow count must be 1..={MAX_TCP_FLOWS}")));
                }
                let cc = take("cc");
                if let Some(cc) = &cc {
                    if cc.is_empty()
                        || cc.len() > 15
                        || !cc.chars().all(|c| c.is_ascii_alphanumeric())
                    {
                        return Err(bad(format!("cc={cc} is not a congestion-control name")));
                    }
                }
                CrossPattern::TcpBulk { flows, cc }
            }
            other => return Err(bad(format!("unknown kind {other:?}; known: {KINDS}"))),
        };
        if let Some((k, _)) = opts.first() {
            return Err(bad(format!("option {k}= does not apply to {kind}")));
        }
        Ok(pattern)
    }

    /// The configured long-run mean rate, if the pattern has one (TCP does not).
    pub fn mean_rate_bps(&self) -> Option<f64> {
        match self {
            CrossPattern::Cbr { rate_bps, .. }
            | CrossPattern::Poisson { rate_bps, .. }
            | CrossPattern::OnOff { rate_bps, .. } => Some(*rate_bps as f64),
            CrossPattern::Step { rates_bps, .. } => {
                Some(rates_bps.iter().sum::<u64>() as f64 / rates_bps.len() as f64)
            }
            CrossPattern::TcpBulk { .. } => None,
        }
    }

    /// The configured rate at `t` since the generator started (for a STEP, the current step).
    pub fn rate_at(&self, t: Duration) -> Option<f64> {
        match self {
            CrossPattern::Step {
                rates_bps, every, ..
            } => {
                let i = (t.as_nanos() / every.as_nanos()) as usize % rates_bps.len();
                Some(rates_bps[i] as f64)
            }
            other => other.mean_rate_bps(),
        }
    }

    /// A send schedule for the UDP kinds; `None` for TCP.
    pub fn schedule(&self) -> Option<Schedule> {
        let frame_ns = |size: u32, rate: u64| (size as u64 + ETH_HLEN) as f64 * 8e9 / rate as f64;
        let state = match self {
            CrossPattern::Cbr { rate_bps, size } => Shape::Periodic {
                gap_ns: frame_ns(*size, *rate_bps),
            },
            CrossPattern::Poisson {
                rate_bps,
                size,
                seed,
            } => Shape::Poisson {
                mean_gap_ns: frame_ns(*size, *rate_bps),
                rng: StdRng::seed_from_u64(*seed),
            },
            CrossPattern::OnOff {
                rate_bps,
                size,
                on,
                off,
                exponential,
                seed,
            } => {
                let on_ns = on.as_nanos() as f64;
                let off_ns = off.as_nanos() as f64;
                let peak = *rate_bps as f64 * (on_ns + off_ns) / on_ns;
                Shape::OnOff {
                    gap_ns: (*size as u64 + ETH_HLEN) as f64 * 8e9 / peak,
                    on_ns,
                    off_ns,
                    exponential: *exponential,
                    rng: StdRng::seed_from_u64(*seed),
                    period_start: 0.0,
                    period_end: None,
                }
            }
            CrossPattern::Step {
                rates_bps,
                every,
                size,
            } => Shape::Step {
                gaps_ns: rates_bps.iter().map(|r| frame_ns(*size, *r)).collect(),
                every_ns: every.as_nanos() as f64,
                step: 0,
            },
            CrossPattern::TcpBulk { .. } => return None,
        };
        let size = match self {
            CrossPattern::Cbr { size, .. }
            | CrossPattern::Poisson { size, .. }
            | CrossPattern::OnOff { size, .. }
            | CrossPattern::Step { size, .. } => *size,
            CrossPattern::TcpBulk { .. } => unreachable!("returned above"),
        };
        Some(Schedule {
            shape: state,
            size,
            next_ns: 0.0,
            k: 0,
        })
    }
}

impl fmt::Display for CrossPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        match self {
            CrossPattern::Cbr { rate_bps, size } => {
                write!(f, "CBR UDP {} Mbit/s, {size} B packets", mb(*rate_bps))
            }
            CrossPattern::Poisson { rate_bps, size, .. } => {
                write!(
                    f,
                    "Poisson UDP {} Mbit/s mean, {size} B packets",
                    mb(*rate_bps)
                )
            }
            CrossPattern::OnOff {
                rate_bps,
                on,
                off,
                exponential,
                ..
            } => write!(
                f,
                "on/off UDP {} Mbit/s mean, {} on / {} off ({})",
                mb(*rate_bps),
                fmt_dur(*on),
                fmt_dur(*off),
                if *exponential { "exponential" } else { "fixed" }
            ),
            CrossPattern::Step {
                rates_bps, every, ..
            } => {
                let r: Vec<String> = rates_bps.iter().map(|r| format!("{}", mb(*r))).collect();
                write!(
                    f,
                    "STEP UDP {} Mbit/s, {} each",
                    r.join(","),
                    fmt_dur(*every)
                )
            }
            CrossPattern::TcpBulk { flows, cc } => {
                write!(
                    f,
                    "TCP bulk, {flows} flow(s), {}",
                    cc.as_deref().unwrap_or("default cc")
                )
            }
        }
    }
}

fn fmt_dur(d: Duration) -> String {
    if d.as_millis() < 1000 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

#[derive(Debug)]
enum Shape {
    Periodic {
        gap_ns: f64,
    },
    Poisson {
        mean_gap_ns: f64,
        rng: StdRng,
    },
    OnOff {
        gap_ns: f64,
        on_ns: f64,
        off_ns: f64,
        exponential: bool,
        rng: StdRng,
        /// Start of the current on-period.
        period_start: f64,
        /// End of the current on-period, once drawn.
        period_end: Option<f64>,
    },
    Step {
        gaps_ns: Vec<f64>,
        every_ns: f64,
        step: u64,
    },
}

/// The send times of a UDP pattern, as offsets from the generator's start. Pure and
/// deterministic: the generator only has to wait for each offset and send.
#[derive(Debug)]
pub struct Schedule {
    shape: Shape,
    size: u32,
    next_ns: f64,
    k: u64,
}

impl Schedule {
    /// IP packet size of every packet.
    pub fn size(&self) -> u32 {
        self.size
    }
}

fn exp_draw(rng: &mut StdRng, mean: f64) -> f64 {
    // 1 - U is in (0, 1], so the log is finite.
    -(1.0 - rng.random::<f64>()).ln() * mean
}

impl Iterator for Schedule {
    /// Offset in nanoseconds of the next packet.
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let t = match &mut self.shape {
            // k * gap rather than a running sum, so rounding never drifts the rate.
            Shape::Periodic { gap_ns } => self.k as f64 * *gap_ns,
            Shape::Poisson { mean_gap_ns, rng } => {
                let t = self.next_ns;
                self.next_ns += exp_draw(rng, *mean_gap_ns);
                t
            }
            Shape::OnOff {
                gap_ns,
                on_ns,
                off_ns,
                exponential,
                rng,
                period_start,
                period_end,
            } => {
                let mut end = match period_end {
                    Some(e) => *e,
                    None => {
                        *period_start
                            + if *exponential {
                                exp_draw(rng, *on_ns)
                            } else {
                                *on_ns
                            }
                    }
                };
                let mut t = *period_start + self.k as f64 * *gap_ns;
                while t >= end {
                    let off = if *exponential {
                        exp_draw(rng, *off_ns)
                    } else {
                        *off_ns
                    };
                    let on = if *exponential {
                        exp_draw(rng, *on_ns)
                    } else {
                        *on_ns
                    };
                    *period_start = end + off;
                    end = *period_start + on;
                    self.k = 0;
                    t = *period_start;
                }
                *period_end = Some(end);
                t
            }
            Shape::Step {
                gaps_ns,
                every_ns,
                step,
            } => {
                let mut start = *step as f64 * *every_ns;
                let mut t =
                    start + self.k as f64 * gaps_ns[(*step % gaps_ns.len() as u64) as usize];
                while t >= start + *every_ns {
                    *step += 1;
                    self.k = 0;
                    start = *step as f64 * *every_ns;
                    t = start;
                }
                t
            }
        };
        self.k += 1;
        Some(t as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame bits the schedule sends in [0, horizon) divided by horizon.
    fn measured_rate(p: &CrossPattern, horizon: Duration) -> f64 {
        let mut s = p.schedule().unwrap();
        let frame_bits = (s.size() as u64 + ETH_HLEN) as f64 * 8.0;
        let h = horizon.as_nanos() as u64;
        let n = s.by_ref().take_while(|&t| t < h).count();
        n as f64 * frame_bits / horizon.as_secs_f64()
    }

    #[test]
    fn parses_every_kind() {
        assert_eq!(
            CrossPattern::parse("cbr:5mbit").unwrap(),
            CrossPattern::Cbr {
                rate_bps: 5_000_000,
                size: 1500
            }
        );
        assert_eq!(
            CrossPattern::parse("poisson:2mbit,size=1000,seed=9").unwrap(),
            CrossPattern::Poisson {
                rate_bps: 2_000_000,
                size: 1000,
                seed: 9
            }
        );
        assert!(matches!(
            CrossPattern::parse("onoff:4mbit,on=100ms,off=300ms,dist=exp").unwrap(),
            CrossPattern::OnOff {
                exponential: true,
                ..
            }
        ));
        assert_eq!(
            CrossPattern::parse("step:1,3,5,6,4,2mbit,every=45s").unwrap(),
            CrossPattern::Step {
                rates_bps: [1, 3, 5, 6, 4, 2].iter().map(|m| m * 1_000_000).collect(),
                every: Duration::from_secs(45),
                size: 1500
            }
        );
        assert_eq!(
            CrossPattern::parse("step:500kbit,2mbit").unwrap(),
            CrossPattern::Step {
                rates_bps: vec![500_000, 2_000_000],
                every: Duration::from_secs(45),
                size: 1500
            }
        );
        assert_eq!(
            CrossPattern::parse("tcp:4,cc=bbr").unwrap(),
            CrossPattern::TcpBulk {
                flows: 4,
                cc: Some("bbr".into())
            }
        );
    }

    #[test]
    fn refuses_nonsense_with_a_reason() {
        for (bad, why) in [
            ("zigzag:5mbit", "unknown kind"),
            ("cbr", "KIND:ARGS"),
            ("cbr:", "exactly one rate"),
            ("cbr:0mbit", "at least 1 bit/s"),
            ("cbr:5mbit,size=9000", "size must be"),
            ("cbr:5mbit,on=5ms", "does not apply"),
            ("tcp:0", "flow count"),
            ("tcp:1000", "flow count"),
            ("onoff:1mbit,dist=weird", "fixed or exp"),
            ("step:,every=1s", "needs rates"),
        ] {
            let e = CrossPattern::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn cbr_schedule_is_exact() {
        let p = CrossPattern::parse("cbr:5mbit").unwrap();
        let r = measured_rate(&p, Duration::from_secs(10));
        // Exact up to the one packet straddling the horizon.
        assert!((r - 5e6).abs() <= 1514.0 * 8.0 / 10.0, "{r}");
        let gaps: Vec<u64> = p.schedule().unwrap().take(4).collect();
        assert_eq!(gaps, vec![0, 2_422_400, 4_844_800, 7_267_200]);
    }

    #[test]
    fn poisson_mean_rate_and_dispersion() {
        for seed in 1..=5 {
            let p = CrossPattern::Poisson {
                rate_bps: 10_000_000,
                size: 1000,
                seed,
            };
            let r = measured_rate(&p, Duration::from_secs(60));
            // 60 s at 10 Mbit/s is ~74k packets: the mean is within 1.5% (> 4 sigma).
            assert!((r / 1e7 - 1.0).abs() < 0.015, "seed {seed}: {r}");
            // Exponential gaps: coefficient of variation near 1, unlike CBR's 0.
            let t: Vec<f64> = p
                .schedule()
                .unwrap()
                .take(20_000)
                .map(|t| t as f64)
                .collect();
            let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            let cv = var.sqrt() / mean;
            assert!((0.95..1.05).contains(&cv), "cv {cv}");
        }
    }

    #[test]
    fn onoff_mean_rate_and_silences() {
        let p = CrossPattern::parse("onoff:4mbit,on=100ms,off=300ms").unwrap();
        let r = measured_rate(&p, Duration::from_secs(20));
        assert!((r / 4e6 - 1.0).abs() < 0.01, "{r}");
        // Nothing is sent during the first off-period [100 ms, 400 ms).
        let times: Vec<u64> = p
            .schedule()
            .unwrap()
            .take_while(|&t| t < 500_000_000)
            .collect();
        assert!(times
            .iter()
            .all(|&t| !(100_000_000..400_000_000).contains(&t)));
        assert!(times.iter().any(|&t| t >= 400_000_000));
        let pe = CrossPattern::parse("onoff:4mbit,on=100ms,off=300ms,dist=exp").unwrap();
        let re = measured_rate(&pe, Duration::from_secs(600));
        assert!((re / 4e6 - 1.0).abs() < 0.05, "{re}");
    }

    #[test]
    fn step_follows_its_rates() {
        let p = CrossPattern::parse("step:1,3,5mbit,every=2s").unwrap();
        let mut s = p.schedule().unwrap();
        let times: Vec<u64> = s.by_ref().take_while(|&t| t < 12_000_000_000).collect();
        let frame_bits = 1514.0 * 8.0;
        for (i, want) in [1e6, 3e6, 5e6, 1e6, 3e6, 5e6].iter().enumerate() {
            let lo = i as u64 * 2_000_000_000;
            let n = times
                .iter()
                .filter(|&&t| t >= lo && t < lo + 2_000_000_000)
                .count();
            let got = n as f64 * frame_bits / 2.0;
            assert!(
                (got - want).abs() <= frame_bits / 2.0 + 1.0,
                "step {i}: {got} vs {want}"
            );
        }
        assert_eq!(p.rate_at(Duration::from_millis(4500)), Some(5e6));
        assert_eq!(p.rate_at(Duration::from_millis(6100)), Some(1e6));
    }
}

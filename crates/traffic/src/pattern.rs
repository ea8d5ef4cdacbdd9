//! Cross-traffic patterns: their text form (`cbr:5mbit`, `step:1,3,5,6,4,2mbit,every=45s`, ...)
//! and deterministic schedules: send times for the UDP kinds, flow arrivals and sizes for the
//! web-like TCP kind.
//!
//! Rates count Ethernet frame bits (IP packet + 14-byte header): the unit the `tc` shaper
//! charges, so a generator's configured rate is directly comparable to the bottleneck capacity
//! and to the counters the ground truth reads. (For `web`, whose packets TCP makes, the flow
//! arrival rate is set from an estimate of each flow's frame bytes; see [`WebModel`].)

use crate::units::{parse_bytes, parse_duration, parse_rate};
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
/// At most this many levels in a `peaks` pattern.
pub const MAX_PEAKS: usize = 1000;
/// Largest web flow: Pareto sizes are cut here, so one draw from the tail cannot occupy the
/// path for minutes (10 MiB is 4 s at 20 Mbit/s).
pub const MAX_WEB_FLOW_BYTES: u64 = 10 << 20;
/// At most this many concurrent web flows.
pub const MAX_WEB_FLOWS: u32 = 256;
/// Each web flow starts with its payload length, 8 bytes big-endian, so the sink knows when it
/// has it all and closes first (the client is then the passive closer and keeps no TIME_WAIT).
pub const WEB_HEADER_BYTES: u64 = 8;
/// TCP payload per full segment on the testbed's 1500-byte MTU (timestamps on).
pub const TCP_MSS: u64 = 1448;
/// Frame bytes around each TCP segment: IP 20 + TCP 32 (with timestamps) + Ethernet 14.
pub const TCP_SEG_OVERHEAD: u64 = 66;
/// Frames a web flow sends besides its data segments: SYN (74 B), the handshake's ACK, the ACK
/// of the sink's FIN and the client's own FIN (66 B each).
pub const TCP_FLOW_OVERHEAD: u64 = 74 + 3 * 66;

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
    /// CBR that holds each level for its own time, cycling (the seeds' PEAKS).
    Peaks { levels: Vec<Peak>, size: u32 },
    /// `flows` greedy TCP connections; their rate is whatever congestion control takes.
    TcpBulk { flows: u32, cc: Option<String> },
    /// Web-like TCP: flows arrive as a Poisson process, each a new connection carrying a
    /// Pareto-sized object (capped at [`MAX_WEB_FLOW_BYTES`]); at most `max_flows` at once.
    Web {
        rate_bps: u64,
        mean_bytes: u64,
        shape: f64,
        seed: u64,
        max_flows: u32,
    },
}

/// One level of a `peaks` pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Peak {
    pub rate_bps: u64,
    #[serde(with = "secs")]
    pub hold: Duration,
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
                     step:R1,R2,...[,every=45s], peaks:R1@T1,R2@T2,..., tcp:FLOWS[,cc=cubic|bbr], \
                     web:RATE[,mean=12kb,shape=1.2,max_flows=64] \
                     (UDP kinds also take size=BYTES; random ones seed=N)";

/// Rates where a bare number borrows the unit of the next one that has a unit (`1,3,5mbit`);
/// with `look_back`, failing that, of the last one before it (`4mbit,8,4`).
fn rates_with_units(values: &[&str], look_back: bool) -> Result<Vec<u64>, Error> {
    let unit_of = |w: &&str| {
        let u = w.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        (!u.is_empty()).then_some(u.to_string())
    };
    let mut rates = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let unit = if v.chars().last().is_some_and(|c| c.is_ascii_digit()) {
            values[i..]
                .iter()
                .find_map(unit_of)
                .or_else(|| {
                    look_back
                        .then(|| values[..i].iter().rev().find_map(unit_of))
                        .flatten()
                })
                .unwrap_or_default()
        } else {
            String::new()
        };
        rates.push(parse_rate(&format!("{v}{unit}"))?);
    }
    Ok(rates)
}

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
        let had_size = opts.iter().any(|(k, _)| k == "size");
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
                let v: Vec<&str> = values.iter().map(String::as_str).collect();
                let rates = rates_with_units(&v, false).map_err(|e| bad(e.to_string()))?;
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
            "peaks" => {
                if values.is_empty() {
                    return Err(bad(
                        "peaks needs levels RATE@DURATION, e.g. peaks:4mbit@30s,8@20s,4@40s".into(),
                    ));
                }
                if values.len() > MAX_PEAKS {
                    return Err(bad(format!("at most {MAX_PEAKS} levels")));
                }
                let mut rates = Vec::with_capacity(values.len());
                let mut holds = Vec::with_capacity(values.len());
                for v in &values {
                    let (r, d) = v.split_once('@').ok_or_else(|| {
                        bad(format!("level {v:?} is not RATE@DURATION, e.g. 4mbit@30s"))
                    })?;
                    rates.push(r.trim());
                    let hold = parse_duration(d).map_err(|e| bad(e.to_string()))?;
                    if hold < Duration::from_millis(10) {
                        return Err(bad(format!("level {v:?}: hold at least 10ms")));
                    }
                    holds.push(hold);
                }
                // A bare rate takes the next unit given, else the last one before it. Unlike
                // `step`, all-bare rates are refused: `peaks:4@30s` reads as Mbit/s but would
                // be 4 bit/s.
                if rates
                    .iter()
                    .all(|r| r.chars().last().is_some_and(|c| c.is_ascii_digit()))
                {
                    return Err(bad(
                        "give the rates a unit (a bare number takes the next one's), e.g. peaks:4@30s,8mbit@20s"
                            .into(),
                    ));
                }
                let rates = rates_with_units(&rates, true).map_err(|e| bad(e.to_string()))?;
                CrossPattern::Peaks {
                    levels: rates
                        .into_iter()
                        .zip(holds)
                        .map(|(rate_bps, hold)| Peak { rate_bps, hold })
                        .collect(),
                    size,
                }
            }
            "web" => {
                let rate_bps = one_rate(&values)?;
                let mean_bytes = match take("mean") {
                    Some(v) => parse_bytes(&v).map_err(|e| bad(e.to_string()))?,
                    None => WebModel::DEFAULT_MEAN_BYTES,
                };
                let shape = match take("shape") {
                    Some(v) => v
                        .parse::<f64>()
                        .map_err(|_| bad(format!("shape={v} is not a number")))?,
                    None => WebModel::DEFAULT_SHAPE,
                };
                let max_flows = match take("max_flows") {
                    Some(v) => v
                        .parse()
                        .map_err(|_| bad(format!("max_flows={v} is not a count")))?,
                    None => MAX_TCP_FLOWS,
                };
                let web = CrossPattern::Web {
                    rate_bps,
                    mean_bytes,
                    shape,
                    seed,
                    max_flows,
                };
                web.web_model()
                    .expect("a web pattern")
                    .validate(max_flows)
                    .map_err(bad)?;
                web
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
        if had_size && matches!(pattern, CrossPattern::Web { .. }) {
            return Err(bad(
                "option size= does not apply to web (TCP makes its packets)".into(),
            ));
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
            // Time-weighted: each level counts for as long as it holds.
            CrossPattern::Peaks { levels, .. } => {
                let bits: f64 = levels
                    .iter()
                    .map(|l| l.rate_bps as f64 * l.hold.as_secs_f64())
                    .sum();
                Some(bits / self.cycle()?.as_secs_f64())
            }
            CrossPattern::Web { rate_bps, .. } => Some(*rate_bps as f64),
            CrossPattern::TcpBulk { .. } => None,
        }
    }

    /// How long the pattern takes to repeat itself, for the stepwise kinds.
    pub fn cycle(&self) -> Option<Duration> {
        match self {
            CrossPattern::Step {
                rates_bps, every, ..
            } => Some(*every * rates_bps.len() as u32),
            CrossPattern::Peaks { levels, .. } => Some(levels.iter().map(|l| l.hold).sum()),
            _ => None,
        }
    }

    /// The arrival and size model of a `web` pattern.
    pub fn web_model(&self) -> Option<WebModel> {
        match *self {
            CrossPattern::Web {
                rate_bps,
                mean_bytes,
                shape,
                ..
            } => Some(WebModel {
                rate_bps: rate_bps as f64,
                mean_bytes: mean_bytes as f64,
                shape,
                cap_bytes: MAX_WEB_FLOW_BYTES as f64,
            }),
            _ => None,
        }
    }

    /// Flow arrivals of a `web` pattern: (offset ns, payload bytes), deterministic per seed.
    pub fn web_arrivals(&self) -> Option<WebArrivals> {
        let CrossPattern::Web { seed, .. } = *self else {
            return None;
        };
        let model = self.web_model()?;
        Some(WebArrivals {
            mean_gap_ns: 1e9 / model.arrivals_per_s(),
            xm: model.scale_bytes(),
            shape: model.shape,
            cap: model.cap_bytes,
            rng: StdRng::seed_from_u64(seed),
            next_ns: 0.0,
        })
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
            CrossPattern::Peaks { levels, .. } => {
                let mut left = t.as_nanos() % self.cycle()?.as_nanos().max(1);
                for l in levels {
                    if left < l.hold.as_nanos() {
                        return Some(l.rate_bps as f64);
                    }
                    left -= l.hold.as_nanos();
                }
                levels.last().map(|l| l.rate_bps as f64)
            }
            other => other.mean_rate_bps(),
        }
    }

    /// A send schedule for the UDP kinds; `None` for the TCP kinds.
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
            CrossPattern::Peaks { levels, size } => {
                let mut starts = Vec::with_capacity(levels.len());
                let mut at = 0.0;
                for l in levels {
                    starts.push(at);
                    at += l.hold.as_nanos() as f64;
                }
                Shape::Peaks {
                    gaps_ns: levels.iter().map(|l| frame_ns(*size, l.rate_bps)).collect(),
                    starts_ns: starts,
                    cycle_ns: at,
                    level: 0,
                    cycle: 0,
                }
            }
            CrossPattern::TcpBulk { .. } | CrossPattern::Web { .. } => return None,
        };
        let size = match self {
            CrossPattern::Cbr { size, .. }
            | CrossPattern::Poisson { size, .. }
            | CrossPattern::OnOff { size, .. }
            | CrossPattern::Step { size, .. }
            | CrossPattern::Peaks { size, .. } => *size,
            CrossPattern::TcpBulk { .. } | CrossPattern::Web { .. } => {
                unreachable!("returned above")
            }
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
            CrossPattern::Peaks { levels, .. } => {
                let l: Vec<String> = levels
                    .iter()
                    .map(|l| format!("{}@{}", mb(l.rate_bps), fmt_dur(l.hold)))
                    .collect();
                write!(f, "PEAKS UDP {} (Mbit/s@hold)", l.join(","))
            }
            CrossPattern::TcpBulk { flows, cc } => {
                write!(
                    f,
                    "TCP bulk, {flows} flow(s), {}",
                    cc.as_deref().unwrap_or("default cc")
                )
            }
            CrossPattern::Web {
                rate_bps,
                mean_bytes,
                shape,
                max_flows,
                ..
            } => write!(
                f,
                "web-like TCP {} Mbit/s, Pareto sizes mean {mean_bytes} B shape {shape}, \
                 Poisson arrivals, at most {max_flows} at once",
                mb(*rate_bps)
            ),
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
    Peaks {
        gaps_ns: Vec<f64>,
        /// Start of each level within a cycle, and the cycle's length.
        starts_ns: Vec<f64>,
        cycle_ns: f64,
        level: usize,
        cycle: u64,
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
            Shape::Peaks {
                gaps_ns,
                starts_ns,
                cycle_ns,
                level,
                cycle,
            } => {
                let begin = |lv: usize, cy: u64| cy as f64 * *cycle_ns + starts_ns[lv];
                let mut t = begin(*level, *cycle) + self.k as f64 * gaps_ns[*level];
                // Past this level's end: the next level starts at its own start (at most one
                // step per call, since every level sends at least its first packet).
                let end = begin(*level, *cycle)
                    + if *level + 1 < starts_ns.len() {
                        starts_ns[*level + 1] - starts_ns[*level]
                    } else {
                        *cycle_ns - starts_ns[*level]
                    };
                if t >= end {
                    *level += 1;
                    if *level == starts_ns.len() {
                        *level = 0;
                        *cycle += 1;
                    }
                    self.k = 0;
                    t = begin(*level, *cycle);
                }
                t
            }
        };
        self.k += 1;
        Some(t as u64)
    }
}

/// The web pattern's model: Poisson flow arrivals, Pareto sizes of the given mean and shape cut
/// at `cap_bytes`, and the arrival rate that makes the long-run offered load `rate_bps` of
/// Ethernet frames.
///
/// Pareto with shape a and mean m has scale xm = m·(a−1)/a. The cap takes the tail's share away
/// from the mean (15% for a = 1.2, m = 12 KiB, cap 10 MiB), and TCP adds headers and
/// handshakes (~7% for such flows), so the arrival rate is λ = rate / (8·E[frame bytes of a
/// flow]) rather than rate / (8·m): the offered load is then the rate asked for, like every
/// other pattern's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WebModel {
    pub rate_bps: f64,
    pub mean_bytes: f64,
    pub shape: f64,
    pub cap_bytes: f64,
}

impl WebModel {
    /// Mean object size of the ImTCP seed's web traffic (§3.5.2): 12 KB.
    pub const DEFAULT_MEAN_BYTES: u64 = 12 << 10;
    /// Pareto shape of the same (after Feldmann et al.).
    pub const DEFAULT_SHAPE: f64 = 1.2;

    /// Refuse what cannot work; the message names the entry.
    pub(crate) fn validate(&self, max_flows: u32) -> Result<(), String> {
        if !(self.shape > 1.0 && self.shape <= 10.0) {
            return Err(format!(
                "shape={}: must be above 1 (at or below it the mean is infinite) and at most 10",
                self.shape
            ));
        }
        if !(64.0..=1048576.0).contains(&self.mean_bytes) {
            return Err(format!(
                "mean={} B: must be 64 B ..= 1 MiB",
                self.mean_bytes
            ));
        }
        if self.scale_bytes() >= self.cap_bytes {
            return Err(format!(
                "mean={} B with shape={} leaves no room under the {} B flow cap",
                self.mean_bytes, self.shape, self.cap_bytes
            ));
        }
        if !(1..=MAX_WEB_FLOWS).contains(&max_flows) {
            return Err(format!(
                "max_flows={max_flows}: must be 1..={MAX_WEB_FLOWS}"
            ));
        }
        let lambda = self.arrivals_per_s();
        if lambda > 10_000.0 {
            return Err(format!(
                "{lambda:.0} new connections per second is more than the testbed can open; lower the rate or raise mean="
            ));
        }
        Ok(())
    }

    /// Pareto scale xm = m·(a−1)/a: the smallest object.
    pub fn scale_bytes(&self) -> f64 {
        self.mean_bytes * (self.shape - 1.0) / self.shape
    }

    /// P(size > x) of the uncut Pareto.
    fn tail(&self, x: f64) -> f64 {
        let xm = self.scale_bytes();
        if x < xm {
            1.0
        } else {
            (xm / x).powf(self.shape)
        }
    }

    /// E[min(S, cap)] = m − cap·(xm/cap)^a/(a−1).
    pub fn capped_mean_bytes(&self) -> f64 {
        let c = self.cap_bytes;
        self.mean_bytes - c * self.tail(c) / (self.shape - 1.0)
    }

    /// E[min(S, cap)²] = a·xm^a·(c^(2−a) − xm^(2−a))/(2−a) + c²·(xm/c)^a, for a ≠ 2.
    pub fn capped_second_moment(&self) -> f64 {
        let (a, xm, c) = (self.shape, self.scale_bytes(), self.cap_bytes);
        let body = if (a - 2.0).abs() < 1e-9 {
            2.0 * xm * xm * (c / xm).ln()
        } else {
            a * xm.powf(a) * (c.powf(2.0 - a) - xm.powf(2.0 - a)) / (2.0 - a)
        };
        body + c * c * self.tail(c)
    }

    /// Expected frame bytes of one flow on the forward path: header and payload, 66 B per
    /// segment, and the handshake's and teardown's frames. E[segments] = Σₖ P(Y > k·MSS) with
    /// Y = min(S, cap) + header, summed over the ≤ 7,300 steps up to the cap.
    pub fn wire_bytes_per_flow(&self) -> f64 {
        let h = WEB_HEADER_BYTES as f64;
        let mss = TCP_MSS as f64;
        let last = ((self.cap_bytes + h) / mss).ceil() as u64;
        let segments: f64 = (0..last)
            .map(|k| {
                let y = k as f64 * mss - h;
                if y >= self.cap_bytes {
                    0.0
                } else {
                    self.tail(y.max(0.0))
                }
            })
            .sum();
        self.capped_mean_bytes() + h + segments * TCP_SEG_OVERHEAD as f64 + TCP_FLOW_OVERHEAD as f64
    }

    /// λ: flows per second so that the offered load is `rate_bps`.
    pub fn arrivals_per_s(&self) -> f64 {
        self.rate_bps / (8.0 * self.wire_bytes_per_flow())
    }

    /// Relative standard deviation of the payload a run of `secs` offers: a compound Poisson
    /// sum has variance λ·T·E[S²], so this is sqrt(E[S²]/(λ·T))/E[S]. Heavy tails make it
    /// large: 40% over 10 s at 5 Mbit/s with the defaults.
    pub fn offered_rel_sd(&self, secs: f64) -> f64 {
        let n = self.arrivals_per_s() * secs;
        (self.capped_second_moment() / n).sqrt() / self.capped_mean_bytes()
    }
}

/// Web flow arrivals: (offset ns since the start, payload bytes), forever; deterministic per
/// seed. Exponential gaps; sizes xm / U^(1/a), cut at the cap.
#[derive(Debug)]
pub struct WebArrivals {
    mean_gap_ns: f64,
    xm: f64,
    shape: f64,
    cap: f64,
    rng: StdRng,
    next_ns: f64,
}

impl Iterator for WebArrivals {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let t = self.next_ns;
        self.next_ns += exp_draw(&mut self.rng, self.mean_gap_ns);
        // 1 - U is in (0, 1], so the size is finite.
        let u = 1.0 - self.rng.random::<f64>();
        let size = (self.xm / u.powf(1.0 / self.shape)).min(self.cap).round();
        Some((t as u64, size.max(1.0) as u64))
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

    fn mbit(m: f64) -> u64 {
        (m * 1e6) as u64
    }

    #[test]
    fn peaks_parse_with_borrowed_units() {
        let p = CrossPattern::parse("peaks:4mbit@30s,8@20s,4@40s").unwrap();
        let want = |r: &[(f64, u64)]| CrossPattern::Peaks {
            levels: r
                .iter()
                .map(|(m, s)| Peak {
                    rate_bps: mbit(*m),
                    hold: Duration::from_secs(*s),
                })
                .collect(),
            size: 1500,
        };
        assert_eq!(p, want(&[(4.0, 30), (8.0, 20), (4.0, 40)]));
        // Step's rule first (the next unit), then the last one before.
        assert_eq!(
            CrossPattern::parse("peaks:4@30s,8mbit@20s,500kbit@10s,2@10s").unwrap(),
            CrossPattern::Peaks {
                levels: vec![
                    Peak {
                        rate_bps: mbit(4.0),
                        hold: Duration::from_secs(30)
                    },
                    Peak {
                        rate_bps: mbit(8.0),
                        hold: Duration::from_secs(20)
                    },
                    Peak {
                        rate_bps: 500_000,
                        hold: Duration::from_secs(10)
                    },
                    Peak {
                        rate_bps: 2_000,
                        hold: Duration::from_secs(10)
                    },
                ],
                size: 1500
            }
        );
        assert!(matches!(
            CrossPattern::parse("peaks:1mbit@1s,size=200").unwrap(),
            CrossPattern::Peaks { size: 200, .. }
        ));
        // Time-weighted mean: (4·30 + 8·20 + 4·40) / 90.
        let m = p.mean_rate_bps().unwrap();
        assert!((m - 440e6 / 90.0).abs() < 1e-6, "{m}");
        assert_eq!(p.cycle(), Some(Duration::from_secs(90)));
        for (t, want) in [
            (0, 4e6),
            (29_999, 4e6),
            (30_000, 8e6),
            (50_000, 4e6),
            (90_000, 4e6),
        ] {
            assert_eq!(p.rate_at(Duration::from_millis(t)), Some(want), "t {t} ms");
        }
        assert_eq!(p.rate_at(Duration::from_millis(125_000)), Some(8e6));
    }

    #[test]
    fn peaks_refuse_nonsense() {
        for (s, why) in [
            ("peaks:", "needs levels"),
            ("peaks:4@30s,8@20s", "give the rates a unit"),
            ("peaks:4mbit", "not RATE@DURATION"),
            ("peaks:4mbit@5ms", "at least 10ms"),
            ("peaks:4mbit@soon", "bad duration"),
            ("peaks:4mbps@1s", "ambiguous"),
            ("peaks:0mbit@1s", "at least 1 bit/s"),
            ("peaks:4mbit@1s,every=2s", "does not apply"),
        ] {
            let e = CrossPattern::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn peaks_schedule_holds_each_level() {
        let p = CrossPattern::parse("peaks:2mbit@1s,6@500ms,4@1500ms,size=1000").unwrap();
        let times: Vec<u64> = p
            .schedule()
            .unwrap()
            .take_while(|&t| t < 6_000_000_000)
            .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "not increasing");
        let frame_bits = 1014.0 * 8.0;
        // Two cycles of 3 s: each level's own window carries its own rate, to one packet.
        let mut lo = 0.0;
        for (rate, hold) in [(2e6, 1.0), (6e6, 0.5), (4e6, 1.5)].repeat(2) {
            let (a, b) = ((lo * 1e9) as u64, ((lo + hold) * 1e9) as u64);
            let n = times.iter().filter(|&&t| t >= a && t < b).count();
            let got = n as f64 * frame_bits / hold;
            assert!(
                (got - rate).abs() <= frame_bits / hold + 1.0,
                "level at {lo} s: {got} vs {rate}"
            );
            lo += hold;
        }
        // Over many cycles the schedule's rate is the time-weighted mean.
        let r = measured_rate(&p, Duration::from_secs(30));
        let m = p.mean_rate_bps().unwrap();
        assert!((r / m - 1.0).abs() < 0.001, "{r} vs {m}");
        // A level too slow for a second packet still sends its first, then the next level starts
        // on time.
        let slow = CrossPattern::parse("peaks:1kbit@100ms,1mbit@100ms").unwrap();
        let t: Vec<u64> = slow.schedule().unwrap().take(3).collect();
        assert_eq!(t, vec![0, 100_000_000, 100_000_000 + 12_112_000]);
    }

    #[test]
    fn web_parses_and_refuses() {
        let w = CrossPattern::parse("web:5mbit").unwrap();
        assert_eq!(
            w,
            CrossPattern::Web {
                rate_bps: 5_000_000,
                mean_bytes: 12_288,
                shape: 1.2,
                seed: 1,
                max_flows: 64
            }
        );
        assert_eq!(w.mean_rate_bps(), Some(5e6));
        assert!(w.schedule().is_none());
        assert_eq!(
            CrossPattern::parse("web:2mbit,mean=20kb,shape=1.5,seed=3,max_flows=10").unwrap(),
            CrossPattern::Web {
                rate_bps: 2_000_000,
                mean_bytes: 20_480,
                shape: 1.5,
                seed: 3,
                max_flows: 10
            }
        );
        for (s, why) in [
            ("web:", "exactly one rate"),
            ("web:5mbit,shape=1", "must be above 1"),
            ("web:5mbit,shape=0.5", "must be above 1"),
            ("web:5mbit,shape=lots", "not a number"),
            ("web:5mbit,mean=10b", "64 B"),
            ("web:5mbit,mean=2mb", "1 MiB"),
            ("web:5mbit,max_flows=0", "max_flows=0"),
            ("web:5mbit,max_flows=1000", "1..=256"),
            ("web:5mbit,size=500", "does not apply to web"),
            ("web:10gbit,mean=64b", "new connections per second"),
        ] {
            let e = CrossPattern::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn web_model_moments() {
        let m = CrossPattern::parse("web:5mbit")
            .unwrap()
            .web_model()
            .unwrap();
        // xm = m·(a−1)/a.
        assert!((m.scale_bytes() - 2048.0).abs() < 1e-9);
        // The cut mean and second moment against a numeric integral of the tail:
        // E[min(S,c)] = ∫₀ᶜ P(S>x) dx, E[min(S,c)²] = ∫₀ᶜ 2x·P(S>x) dx (log-spaced midpoints).
        let (xm, c, a) = (2048.0f64, m.cap_bytes, m.shape);
        let steps = 200_000;
        let (mut m1, mut m2) = (xm, xm * xm);
        let r = (c / xm).powf(1.0 / steps as f64);
        let mut x = xm;
        for _ in 0..steps {
            let (x1, mid) = (x * r, x * r.sqrt());
            let p = (xm / mid).powf(a);
            m1 += p * (x1 - x);
            m2 += 2.0 * mid * p * (x1 - x);
            x = x1;
        }
        assert!((m.capped_mean_bytes() / m1 - 1.0).abs() < 1e-4, "{m1}");
        assert!((m.capped_second_moment() / m2 - 1.0).abs() < 1e-4, "{m2}");
        // The cap takes ~15% off the nominal mean.
        assert!((m.capped_mean_bytes() / 12288.0 - 0.849).abs() < 0.002);
        // λ makes the offered frame load the rate asked for.
        let lambda = m.arrivals_per_s();
        assert!((lambda * 8.0 * m.wire_bytes_per_flow() - 5e6).abs() < 1e-3);
        assert!((50.0..60.0).contains(&lambda), "{lambda}");
        // Heavy tails: over 10 s (~560 flows) the offered load has a relative sd of 40%.
        let sd = m.offered_rel_sd(10.0);
        assert!((sd - 0.40).abs() < 0.01, "{sd}");
    }

    #[test]
    fn web_arrivals_follow_the_model() {
        let p = CrossPattern::parse("web:5mbit,seed=7").unwrap();
        let m = p.web_model().unwrap();
        let n = 1_000_000usize;
        let flows: Vec<(u64, u64)> = p.web_arrivals().unwrap().take(n).collect();
        assert!(flows.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(flows
            .iter()
            .all(|&(_, s)| (2048..=MAX_WEB_FLOW_BYTES).contains(&s)));
        let mean = flows.iter().map(|f| f.1 as f64).sum::<f64>() / n as f64;
        // sd of the mean of n cut-Pareto sizes: sqrt((E[S²] − E[S]²)/n) ≈ 98 B; allow 4 sd.
        let sd = ((m.capped_second_moment() - m.capped_mean_bytes().powi(2)) / n as f64).sqrt();
        assert!(
            (mean - m.capped_mean_bytes()).abs() < 4.0 * sd,
            "mean {mean} vs {} ± {}",
            m.capped_mean_bytes(),
            4.0 * sd
        );
        // Poisson arrivals: n gaps of mean 1/λ, relative sd 1/sqrt(n) = 0.1%.
        let span = flows.last().unwrap().0 as f64 / 1e9;
        let rate = (n - 1) as f64 / span;
        assert!((rate / m.arrivals_per_s() - 1.0).abs() < 0.004, "{rate}");
        // Same seed, same flows.
        let again: Vec<(u64, u64)> = p.web_arrivals().unwrap().take(100).collect();
        assert_eq!(again, flows[..100]);
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

//! Traceroute between agents, sans-IO: which trains to send, what each round says per hop,
//! and the report over a few rounds. No socket or clock here; [`crate::run`] drives it.
//!
//! A round is one **parallel traceroute** train: probes with TTL 1..=H leave together (a
//! short gap apart) over the session to the peer agent. Routers answer the probes whose TTL
//! expires with them (ICMP time exceeded, tied to the probe by the engine), and the probes
//! that live long enough reach the peer agent, which reports their receive times as for any
//! train. So one round gives a delay per hop: an RTT for each router, and for the agent the
//! one-way delay (sender's kernel TX stamp to the agent's kernel RX stamp). The minimum over
//! rounds is each hop's base latency (seed 003 §4.1).

use mgrp_train::{HopClock, ProbeSpec, TrainResult, TrainSpec, MAX_PROBE_SIZE, MIN_PROBE_SIZE};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The largest TTL a trace probes.
pub const MAX_TTL: u8 = 64;
/// Most rounds one trace runs.
pub const MAX_RUNS: u32 = 100;
/// Longest gap between two probes of a round (a round is meant to be one RTT).
pub const MAX_GAP_NS: u64 = 10_000_000;

/// ICMP(v4) time exceeded and ICMPv6 time exceeded: the router's TTL expiry.
const TIME_EXCEEDED_V4: u8 = 11;
const TIME_EXCEEDED_V6: u8 = 3;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("TTL {0} is out of range: hops are 1..={MAX_TTL}")]
    Ttl(u32),
    #[error("runs must be 1..={MAX_RUNS}, not {0}")]
    Runs(u32),
    #[error("probe size {0} is outside {MIN_PROBE_SIZE}..={MAX_PROBE_SIZE} bytes")]
    Size(u16),
    #[error("gap {0} ns between a round's probes is longer than {MAX_GAP_NS} ns")]
    Gap(u64),
}

/// What a trace asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceConfig {
    /// Highest TTL probed (1..=64).
    pub max_hops: u8,
    /// Rounds (parallel traceroutes); the minimum per hop over them is the base latency.
    pub runs: u32,
    /// Probe size, UDP payload bytes.
    pub size: u16,
    /// Gap between the probes of a round.
    pub gap_ns: u64,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            max_hops: 30,
            runs: 3,
            size: 64,
            gap_ns: 20_000,
        }
    }
}

impl TraceConfig {
    /// Check the numbers a person typed (`max_hops` as typed, before it is cut to a `u8`).
    pub fn checked(max_hops: u32, runs: u32, size: u16, gap_ns: u64) -> Result<Self, TraceError> {
        if max_hops == 0 || max_hops > MAX_TTL as u32 {
            return Err(TraceError::Ttl(max_hops));
        }
        let c = TraceConfig {
            max_hops: max_hops as u8,
            runs,
            size,
            gap_ns,
        };
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), TraceError> {
        if self.max_hops == 0 || self.max_hops > MAX_TTL {
            return Err(TraceError::Ttl(self.max_hops as u32));
        }
        if self.runs == 0 || self.runs > MAX_RUNS {
            return Err(TraceError::Runs(self.runs));
        }
        if !(MIN_PROBE_SIZE..=MAX_PROBE_SIZE).contains(&self.size) {
            return Err(TraceError::Size(self.size));
        }
        if self.gap_ns > MAX_GAP_NS {
            return Err(TraceError::Gap(self.gap_ns));
        }
        Ok(())
    }
}

/// One parallel traceroute round: probes with TTL `1..=hops`, `gap_ns` apart, carrying no
/// riders (a rider would change what the routers quote nothing of, but also the probe's
/// bytes, and a trace probe is about time, not load).
pub fn parallel_train(hops: u8, size: u16, gap_ns: u64) -> Result<TrainSpec, TraceError> {
    if hops == 0 || hops > MAX_TTL {
        return Err(TraceError::Ttl(hops as u32));
    }
    Ok(TrainSpec::new(
        (1..=hops)
            .map(|ttl| ProbeSpec {
                size,
                gap_ns: if ttl == 1 { 0 } else { gap_ns },
                ttl: Some(ttl),
                may_carry: false,
            })
            .collect(),
    ))
}

/// What one hop said in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answer {
    /// A router's TTL expiry: its address and the probe's round trip.
    Router {
        addr: IpAddr,
        rtt_ns: u64,
        clock: HopClock,
    },
    /// Something on the path said the destination is unreachable (the path ends there).
    Unreachable {
        addr: IpAddr,
        icmp_type: u8,
        icmp_code: u8,
        rtt_ns: u64,
    },
    /// The probe reached the peer agent: the one-way delay, sender kernel TX (or the pacer's
    /// stamp) to the agent's kernel RX. Its absolute value needs the two clocks to agree;
    /// differences between rounds do not.
    Agent { owd_ns: i64 },
    /// The probe was sent and nothing came back (`*`).
    Silent,
    /// The probe never left (a send error).
    NotSent,
}

impl Answer {
    /// The hop's delay sample: an RTT for a router, the one-way delay for the agent.
    pub fn delay_ns(&self) -> Option<i64> {
        match *self {
            Answer::Router { rtt_ns, .. } | Answer::Unreachable { rtt_ns, .. } => {
                Some(rtt_ns as i64)
            }
            Answer::Agent { owd_ns } => Some(owd_ns),
            Answer::Silent | Answer::NotSent => None,
        }
    }

    pub fn addr(&self) -> Option<IpAddr> {
        match *self {
            Answer::Router { addr, .. } | Answer::Unreachable { addr, .. } => Some(addr),
            _ => None,
        }
    }
}

/// One round: each probed TTL's answer (index = TTL − 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub train: u32,
    pub answers: Vec<Answer>,
}

impl Round {
    /// Read a round from the train `spec` (as [`parallel_train`] made it) and its result.
    /// Probes without a TTL are ignored; TTLs may come in any order.
    pub fn of(spec: &TrainSpec, r: &TrainResult) -> Round {
        let hops = spec.probes.iter().filter_map(|p| p.ttl).max().unwrap_or(0);
        let mut answers = vec![Answer::NotSent; hops as usize];
        for (p, res) in spec.probes.iter().zip(&r.probes) {
            let Some(ttl) = p.ttl else { continue };
            answers[ttl as usize - 1] = answer(res);
        }
        Round {
            train: r.train,
            answers,
        }
    }

    /// The lowest TTL at which the path ended (agent reached or unreachable), if it did.
    pub fn end(&self) -> Option<u8> {
        self.answers
            .iter()
            .position(|a| matches!(a, Answer::Agent { .. } | Answer::Unreachable { .. }))
            .map(|i| i as u8 + 1)
    }

    /// The delay vector of this round, hop by hop up to where the path ended: what Tneck
    /// compares with each hop's base.
    pub fn delays(&self) -> Vec<Option<i64>> {
        let n = self.end().map_or(self.answers.len(), |e| e as usize);
        self.answers[..n].iter().map(Answer::delay_ns).collect()
    }
}

fn answer(p: &mgrp_train::ProbeResult) -> Answer {
    if p.sent_ns.is_none() {
        return Answer::NotSent;
    }
    if let Some(rx) = p.rx_ns {
        let tx = p.tx_kernel_ns.unwrap_or(p.tx_real_ns);
        return Answer::Agent {
            owd_ns: rx.0 as i64 - tx.0 as i64,
        };
    }
    match p.hop {
        Some(h) if is_time_exceeded(h.from, h.icmp_type) => Answer::Router {
            addr: h.from,
            rtt_ns: h.rtt_ns,
            clock: h.clock,
        },
        Some(h) => Answer::Unreachable {
            addr: h.from,
            icmp_type: h.icmp_type,
            icmp_code: h.icmp_code,
            rtt_ns: h.rtt_ns,
        },
        None => Answer::Silent,
    }
}

fn is_time_exceeded(from: IpAddr, icmp_type: u8) -> bool {
    match from {
        IpAddr::V4(_) => icmp_type == TIME_EXCEEDED_V4,
        IpAddr::V6(_) => icmp_type == TIME_EXCEEDED_V6,
    }
}

/// A trace: plans its rounds and folds their results (sans-IO: `poll_train` / `handle_train`).
#[derive(Debug, Clone)]
pub struct Tracer {
    cfg: TraceConfig,
    rounds: Vec<Round>,
    probe_bytes: u64,
}

impl Tracer {
    pub fn new(cfg: TraceConfig) -> Result<Tracer, TraceError> {
        cfg.validate()?;
        Ok(Tracer {
            cfg,
            rounds: Vec::new(),
            probe_bytes: 0,
        })
    }

    /// The next round's train, `None` when all rounds are done. Once a round has found where
    /// the path ends, later rounds probe no further than that.
    pub fn poll_train(&self) -> Option<TrainSpec> {
        if self.rounds.len() >= self.cfg.runs as usize {
            return None;
        }
        let hops = self.end().unwrap_or(self.cfg.max_hops);
        parallel_train(hops, self.cfg.size, self.cfg.gap_ns).ok()
    }

    pub fn handle_train(&mut self, spec: &TrainSpec, r: &TrainResult) {
        self.probe_bytes += spec.bytes();
        self.rounds.push(Round::of(spec, r));
    }

    pub fn rounds(&self) -> &[Round] {
        &self.rounds
    }

    /// Where the path ends: the lowest end any round saw.
    fn end(&self) -> Option<u8> {
        self.rounds.iter().filter_map(Round::end).min()
    }

    /// The report over the rounds so far.
    pub fn report(&self, peer: &str) -> TraceReport {
        let end = self.end();
        let last = end.unwrap_or(self.cfg.max_hops) as usize;
        let hops: Vec<HopRow> = (1..=last).map(|ttl| self.row(ttl, peer, end)).collect();
        let loops = find_loops(&hops);
        TraceReport {
            peer: peer.to_string(),
            runs: self.rounds.len() as u32,
            reached: hops.last().is_some_and(|h| h.agent && h.replies > 0),
            hops,
            loops,
            control_rtt_ns: None,
            probe_bytes: self.probe_bytes,
        }
    }

    fn row(&self, ttl: usize, peer: &str, end: Option<u8>) -> HopRow {
        let answers: Vec<&Answer> = self
            .rounds
            .iter()
            .filter_map(|r| r.answers.get(ttl - 1))
            .collect();
        let sent = answers
            .iter()
            .filter(|a| !matches!(a, Answer::NotSent))
            .count() as u32;
        let mut delays: Vec<i64> = answers.iter().filter_map(|a| a.delay_ns()).collect();
        delays.sort_unstable();
        let mut addrs: Vec<IpAddr> = Vec::new();
        for a in answers.iter().filter_map(|a| a.addr()) {
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
        let agent =
            end == Some(ttl as u8) && answers.iter().any(|a| matches!(a, Answer::Agent { .. }));
        if agent {
            if let Ok(ip) = peer_ip(peer) {
                if !addrs.contains(&ip) {
                    addrs.push(ip);
                }
            }
        }
        let unreachable = answers.iter().find_map(|a| match a {
            Answer::Unreachable {
                icmp_type,
                icmp_code,
                ..
            } => Some((*icmp_type, *icmp_code)),
            _ => None,
        });
        HopRow {
            ttl: ttl as u8,
            addrs,
            agent,
            min_ns: delays.first().copied(),
            median_ns: median(&delays),
            replies: delays.len() as u32,
            sent,
            unreachable,
        }
    }
}

fn peer_ip(peer: &str) -> Result<IpAddr, ()> {
    peer.parse::<std::net::SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| peer.parse::<IpAddr>())
        .map_err(|_| ())
}

fn median(sorted: &[i64]) -> Option<i64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

/// One hop of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopRow {
    pub ttl: u8,
    /// Who answered at this TTL over the rounds (more than one: ECMP or a route change).
    pub addrs: Vec<IpAddr>,
    /// This hop is the peer agent: its delays are one-way, not round trips.
    pub agent: bool,
    /// Minimum (the base latency) and median delay over the rounds, ns.
    pub min_ns: Option<i64>,
    pub median_ns: Option<i64>,
    pub replies: u32,
    pub sent: u32,
    /// ICMP type and code, if the path said the destination is unreachable here.
    pub unreachable: Option<(u8, u8)>,
}

/// The same address answered at two hops: a routing loop (or paths of different lengths
/// between rounds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopNote {
    pub addr: IpAddr,
    pub ttls: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceReport {
    pub peer: String,
    pub runs: u32,
    /// The peer agent answered at the last hop.
    pub reached: bool,
    pub hops: Vec<HopRow>,
    pub loops: Vec<LoopNote>,
    /// The control connection's round-trip time to the agent (kernel TCP_INFO), if known: an
    /// RTT to the last hop that needs no synchronized clocks.
    pub control_rtt_ns: Option<u64>,
    pub probe_bytes: u64,
}

fn find_loops(hops: &[HopRow]) -> Vec<LoopNote> {
    let mut out: Vec<LoopNote> = Vec::new();
    for h in hops.iter().filter(|h| !h.agent) {
        for a in &h.addrs {
            match out.iter_mut().find(|l| l.addr == *a) {
                Some(l) => l.ttls.push(h.ttl),
                None => out.push(LoopNote {
                    addr: *a,
                    ttls: vec![h.ttl],
                }),
            }
        }
    }
    out.retain(|l| l.ttls.len() > 1);
    out
}

impl TraceReport {
    /// The report as a table for people: hop, address, min/median delay (ms), replies/sent.
    /// Trailing hops that never answered are folded into one line.
    pub fn table(&self) -> String {
        let mut s = format!(
            "trace to {}: {} run(s), {} probe bytes\n{:>3}  {:<28} {:>10} {:>10} {:>7}\n",
            self.peer,
            self.runs,
            self.probe_bytes,
            "hop",
            "address",
            "min ms",
            "median ms",
            "replies"
        );
        let answered = self.hops.iter().rposition(|h| h.replies > 0);
        let shown = answered.map_or(0, |i| i + 1);
        for h in &self.hops[..shown] {
            s.push_str(&row_line(h));
        }
        if shown < self.hops.len() {
            let (a, b) = (self.hops[shown].ttl, self.hops[self.hops.len() - 1].ttl);
            let span = if a == b {
                format!("{a}")
            } else {
                format!("{a}-{b}")
            };
            s.push_str(&format!("{span:>3}  * (no answer)\n"));
        }
        if self.hops.iter().any(|h| h.agent) {
            s.push_str("(1-way): the agent's one-way delay, kernel TX to kernel RX stamps; needs the two clocks to agree\n");
        }
        if let Some(r) = self.control_rtt_ns {
            s.push_str(&format!(
                "control connection RTT to the agent: {} ms\n",
                ms(r as i64)
            ));
        }
        for l in &self.loops {
            let ttls: Vec<String> = l.ttls.iter().map(|t| t.to_string()).collect();
            s.push_str(&format!(
                "loop: {} answered at hops {} (a routing loop, or paths of different lengths)\n",
                l.addr,
                ttls.join(", ")
            ));
        }
        if !self.reached {
            s.push_str("the peer agent was not reached\n");
        }
        s
    }
}

fn row_line(h: &HopRow) -> String {
    let mut addr = match h.addrs.as_slice() {
        [] => "*".to_string(),
        a => a
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    };
    if h.agent {
        addr.push_str(" (agent)");
    }
    if let Some((t, c)) = h.unreachable {
        addr.push_str(&format!(" !{t}/{c}"));
    }
    let d = |v: Option<i64>| v.map_or("*".to_string(), ms);
    let tag = if h.agent { " (1-way)" } else { "" };
    let replies = format!("{}/{}", h.replies, h.sent);
    format!(
        "{:>3}  {:<28} {:>10} {:>10} {replies:>7}{tag}\n",
        h.ttl,
        addr,
        d(h.min_ns),
        d(h.median_ns),
    )
}

fn ms(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_train::{Arrival, HopReply, MatchRule, MonoNs, SendRecord, WallNs};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A round's result: `answers[ttl-1]` is `Some((router, rtt_us))`, `None` for silence;
    /// TTLs from `reach` on arrive at the agent after `owd_us`.
    fn result(
        spec: &TrainSpec,
        train: u32,
        answers: &[Option<(&str, u64)>],
        reach: Option<u8>,
        owd_us: u64,
    ) -> TrainResult {
        let start = MonoNs(1_000_000);
        let sends: Vec<SendRecord> = (0..spec.probes.len())
            .map(|i| SendRecord {
                mono_ns: Some(start.add_ns(i as u64 * 1000)),
                real_ns: WallNs(5_000_000 + i as u64 * 1000),
                kernel_ns: None,
            })
            .collect();
        let arrivals: Vec<Arrival> = spec
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| reach.is_some_and(|r| p.ttl.unwrap() >= r))
            .map(|(i, p)| Arrival {
                index: i as u16,
                size: p.size,
                rx_ns: WallNs(5_000_000 + i as u64 * 1000 + owd_us * 1000),
            })
            .collect();
        let mut r = TrainResult::assemble(
            train,
            "198.18.3.2:7240".into(),
            spec,
            start,
            &sends,
            Some((&arrivals, false)),
        );
        for (i, a) in answers.iter().enumerate() {
            if let Some((addr, rtt_us)) = a {
                r.probes[i].hop = Some(HopReply {
                    from: ip(addr),
                    icmp_type: 11,
                    icmp_code: 0,
                    rx_mono_ns: MonoNs(0),
                    rx_kernel_ns: None,
                    rtt_ns: rtt_us * 1000,
                    clock: HopClock::User,
                    matched_by: MatchRule::Header,
                });
            }
        }
        r
    }

    #[test]
    fn bad_numbers_are_clear_errors() {
        assert_eq!(TraceConfig::checked(0, 3, 64, 0), Err(TraceError::Ttl(0)));
        assert_eq!(TraceConfig::checked(65, 3, 64, 0), Err(TraceError::Ttl(65)));
        assert_eq!(
            TraceConfig::checked(300, 3, 64, 0),
            Err(TraceError::Ttl(300))
        );
        assert!(TraceConfig::checked(64, 3, 64, 0).is_ok());
        assert_eq!(TraceConfig::checked(8, 0, 64, 0), Err(TraceError::Runs(0)));
        assert_eq!(TraceConfig::checked(8, 3, 20, 0), Err(TraceError::Size(20)));
        assert!(parallel_train(0, 64, 0).is_err());
        assert!(TraceConfig::checked(0, 3, 64, 0)
            .unwrap_err()
            .to_string()
            .contains("1..=64"));
    }

    #[test]
    fn rounds_find_routers_then_the_agent_and_later_rounds_stop_there() {
        let mut t = Tracer::new(TraceConfig {
            max_hops: 8,
            ..Default::default()
        })
        .unwrap();
        let spec = t.poll_train().unwrap();
        assert_eq!(spec.probes.len(), 8);
        assert_eq!(
            spec.probes
                .iter()
                .map(|p| p.ttl.unwrap())
                .collect::<Vec<_>>(),
            (1..=8).collect::<Vec<_>>()
        );
        assert!(spec.validate().is_ok());
        let hops = [
            Some(("198.18.0.2", 100)),
            Some(("198.18.1.2", 2_100)),
            Some(("198.18.2.2", 5_200)),
        ];
        let r = result(&spec, 1, &hops, Some(4), 7_000);
        t.handle_train(&spec, &r);
        let round = &t.rounds()[0];
        assert_eq!(round.end(), Some(4));
        assert_eq!(
            round.delays(),
            vec![
                Some(100_000),
                Some(2_100_000),
                Some(5_200_000),
                Some(7_000_000)
            ]
        );
        // Now only TTL 1..=4.
        let spec2 = t.poll_train().unwrap();
        assert_eq!(spec2.probes.len(), 4);
        let slower = [
            Some(("198.18.0.2", 150)),
            Some(("198.18.1.2", 2_000)),
            Some(("198.18.2.2", 5_900)),
        ];
        t.handle_train(&spec2, &result(&spec2, 2, &slower, Some(4), 7_500));
        let spec3 = t.poll_train().unwrap();
        t.handle_train(&spec3, &result(&spec3, 3, &hops, Some(4), 7_200));
        assert!(t.poll_train().is_none(), "three runs by default");
        let rep = t.report("198.18.3.2:7240");
        assert!(rep.reached && rep.loops.is_empty());
        assert_eq!(rep.hops.len(), 4);
        assert_eq!(rep.hops[1].addrs, vec![ip("198.18.1.2")]);
        assert_eq!(
            (rep.hops[1].min_ns, rep.hops[1].median_ns),
            (Some(2_000_000), Some(2_100_000))
        );
        assert_eq!((rep.hops[2].replies, rep.hops[2].sent), (3, 3));
        let agent = &rep.hops[3];
        assert!(agent.agent);
        assert_eq!(agent.addrs, vec![ip("198.18.3.2")]);
        assert_eq!(agent.min_ns, Some(7_000_000));
        let table = rep.table();
        assert!(table.contains("198.18.3.2 (agent)"), "{table}");
        assert!(table.contains("(1-way)"), "{table}");
        assert!(table.contains("2.000      2.100     3/3\n"), "{table}");
        let json = serde_json::to_string(&rep).unwrap();
        assert_eq!(serde_json::from_str::<TraceReport>(&json).unwrap(), rep);
    }

    #[test]
    fn silent_routers_show_a_star_and_the_trace_goes_on() {
        let mut t = Tracer::new(TraceConfig {
            max_hops: 6,
            runs: 2,
            ..Default::default()
        })
        .unwrap();
        for train in 1..=2 {
            let spec = t.poll_train().unwrap();
            let hops = [Some(("198.18.0.2", 100)), None, Some(("198.18.2.2", 300))];
            t.handle_train(&spec, &result(&spec, train, &hops, Some(4), 400));
        }
        let rep = t.report("198.18.3.2");
        assert!(rep.reached);
        let silent = &rep.hops[1];
        assert_eq!((silent.replies, silent.sent, silent.min_ns), (0, 2, None));
        assert!(silent.addrs.is_empty());
        assert!(rep.table().contains("  2  *"), "{}", rep.table());
    }

    #[test]
    fn an_unreached_agent_ends_at_max_hops_with_trailing_stars_folded() {
        let mut t = Tracer::new(TraceConfig {
            max_hops: 10,
            runs: 1,
            ..Default::default()
        })
        .unwrap();
        let spec = t.poll_train().unwrap();
        let hops = [Some(("198.18.0.2", 100)), Some(("198.18.1.2", 200))];
        t.handle_train(&spec, &result(&spec, 1, &hops, None, 0));
        let rep = t.report("198.18.3.2");
        assert!(!rep.reached);
        assert_eq!(rep.hops.len(), 10);
        let table = rep.table();
        assert!(table.contains("3-10  * (no answer)"), "{table}");
        assert!(table.contains("not reached"), "{table}");
    }

    #[test]
    fn a_loop_is_reported_not_followed_forever() {
        let mut t = Tracer::new(TraceConfig {
            max_hops: 6,
            runs: 1,
            ..Default::default()
        })
        .unwrap();
        let spec = t.poll_train().unwrap();
        // r1, r2, then r1 and r2 again: packets bounce between two routers until the TTL ends.
        let (r1, r2) = ("198.18.0.2", "198.18.1.2");
        let hops = [
            Some((r1, 100)),
            Some((r2, 200)),
            Some((r1, 300)),
            Some((r2, 400)),
            Some((r1, 500)),
            Some((r2, 600)),
        ];
        t.handle_train(&spec, &result(&spec, 1, &hops, None, 0));
        let rep = t.report("198.18.3.2");
        assert!(!rep.reached);
        assert_eq!(
            rep.loops,
            vec![
                LoopNote {
                    addr: ip(r1),
                    ttls: vec![1, 3, 5]
                },
                LoopNote {
                    addr: ip(r2),
                    ttls: vec![2, 4, 6]
                }
            ]
        );
        assert!(rep
            .table()
            .contains("loop: 198.18.0.2 answered at hops 1, 3, 5"));
    }

    #[test]
    fn unreachable_ends_the_path() {
        let spec = parallel_train(4, 64, 0).unwrap();
        let mut r = result(
            &spec,
            1,
            &[Some(("198.18.0.2", 100)), Some(("198.18.1.2", 200))],
            None,
            0,
        );
        r.probes[1].hop.as_mut().unwrap().icmp_type = 3;
        r.probes[1].hop.as_mut().unwrap().icmp_code = 1;
        let round = Round::of(&spec, &r);
        assert_eq!(round.end(), Some(2));
        assert_eq!(round.delays(), vec![Some(100_000), Some(200_000)]);
        let mut t = Tracer::new(TraceConfig {
            max_hops: 4,
            runs: 1,
            ..Default::default()
        })
        .unwrap();
        t.handle_train(&spec, &r);
        let rep = t.report("198.18.3.2");
        assert_eq!(rep.hops.len(), 2);
        assert_eq!(rep.hops[1].unreachable, Some((3, 1)));
        assert!(rep.table().contains("!3/1"));
    }
}

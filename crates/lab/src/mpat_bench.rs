//! `mgrp bench mpat`: MPAT (`mgrp_mpat`) and mulTCP (`mgrp_multcp`) in the kernel against
//! CUBIC background flows through one testbed bottleneck (issue 18's benchmark; seed 003 §2).
//! Truth is each flow's goodput at its receiver (bytes the sink read, sampled every 100 ms).
//!
//! Five scenarios, all on one dumbbell (C = 90 Mbit/s, RTT 50 ms, one BDP of buffer by
//! default), every flow from `snd` to `rcv` on its own port; MPAT members join by a
//! (destination, port) rule:
//! 1. **weights** 1:2:3:4:5 against 5 CUBIC flows: each member's goodput over the weight-1
//!    member's, the aggregate over N fair shares (fair share = all TCP goodput / all flows),
//!    the background's Jain index.
//! 2. **many**: one aggregate of N flows against B CUBIC flows, and mulTCP with N beside it
//!    (alone with the same B). The kernel aggregate has at most 16 windows, so N = 16 for MPAT;
//!    mulTCP is one socket and runs N = 16 and N = 100.
//! 3. **ladder**: three flows 1 : √k : k for rising k: max/min goodput against k.
//! 4. **reweight**: three members and 2 CUBIC flows, the weights changed every phase: time from
//!    each change until the shares hold within 10 % (bins of 250 ms).
//! 5. **cbr**: three members 1:2:3 and 2 CUBIC flows; a 30 Mbit/s CBR flow (xsnd → xrcv, same
//!    bottleneck) starts mid-run: the aggregate's rate before and after, how long it took to cut,
//!    and the split after.

use crate::modes_bench::{tcp_sysctls, BulkFlow};
use crate::{ensure, Error, Hooks, Result};
use mgrp_control::{MemberRule, MpatControls};
use mgrp_testbed::generator::{CrossTraffic, Endpoints, GenOptions};
use mgrp_testbed::{Buffer, CrossPattern, DelayMode, Role, Testbed, TestbedConfig};

use serde::Serialize;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The receiver's byte counts are read this often.
const SAMPLE: Duration = Duration::from_millis(100);
/// Bins for the reweight and CBR transitions.
const BIN_S: f64 = 0.25;
/// A share "holds" within this relative error (the issue's ±10 %).
const TOL: f64 = 0.10;
/// ... for this many consecutive bins (1 s).
const HOLD_BINS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MpatScenario {
    Weights,
    Many,
    Ladder,
    Reweight,
    Cbr,
}

impl MpatScenario {
    pub const ALL: [MpatScenario; 5] = [
        MpatScenario::Weights,
        MpatScenario::Many,
        MpatScenario::Ladder,
        MpatScenario::Reweight,
        MpatScenario::Cbr,
    ];

    pub fn parse(s: &str) -> Result<MpatScenario> {
        Ok(match s {
            "weights" => MpatScenario::Weights,
            "many" => MpatScenario::Many,
            "ladder" => MpatScenario::Ladder,
            "reweight" => MpatScenario::Reweight,
            "cbr" => MpatScenario::Cbr,
            _ => {
                return Err(Error::Config(format!(
                    "unknown scenario {s:?}: weights, many, ladder, reweight, cbr"
                )))
            }
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MpatBenchConfig {
    pub scenarios: Vec<MpatScenario>,
    pub capacity_mbit: f64,
    pub rtt_ms: f64,
    /// Bottleneck buffer in BDPs.
    pub buffer_bdp: f64,
    /// Seconds before goodput counts, in every run.
    pub warmup_s: f64,
    /// Seconds measured (weights, many; cbr before and after the CBR each).
    pub measure_s: f64,
    pub weights: Vec<u32>,
    pub weights_background: usize,
    /// MPAT members in `many` (≤ 16, the kernel's windows per aggregate).
    pub many_n: usize,
    pub many_background: usize,
    pub multcp_n: Vec<u32>,
    /// k of the ladder's 1 : √k : k.
    pub ladder: Vec<u32>,
    pub ladder_measure_s: f64,
    /// Weight sets the reweight scenario cycles through, one per phase.
    pub reweights: Vec<Vec<u32>>,
    pub phase_s: f64,
    pub cbr_mbit: f64,
}

impl MpatBenchConfig {
    /// About 10 minutes.
    pub fn standard() -> MpatBenchConfig {
        MpatBenchConfig {
            scenarios: MpatScenario::ALL.to_vec(),
            capacity_mbit: 90.0,
            rtt_ms: 50.0,
            buffer_bdp: 1.0,
            warmup_s: 10.0,
            measure_s: 40.0,
            weights: vec![1, 2, 3, 4, 5],
            weights_background: 5,
            many_n: 16,
            many_background: 10,
            multcp_n: vec![16, 100],
            ladder: vec![10, 30, 95, 200, 500],
            ladder_measure_s: 20.0,
            reweights: vec![vec![1, 2, 3], vec![3, 2, 1], vec![1, 1, 4], vec![2, 3, 1]],
            phase_s: 20.0,
            cbr_mbit: 30.0,
        }
    }

    /// Every scenario, short (about 3 minutes): a smoke run, not figures.
    pub fn quick() -> MpatBenchConfig {
        MpatBenchConfig {
            warmup_s: 5.0,
            measure_s: 10.0,
            multcp_n: vec![100],
            ladder: vec![10, 95],
            ladder_measure_s: 8.0,
            reweights: vec![vec![1, 2, 3], vec![3, 2, 1]],
            phase_s: 8.0,
            ..MpatBenchConfig::standard()
        }
    }

    pub fn check(&self) -> Result<()> {
        ensure(!self.scenarios.is_empty(), "no scenarios")?;
        ensure(
            (1.0..=1000.0).contains(&self.capacity_mbit),
            "capacity must be 1..=1000 Mbit/s",
        )?;
        ensure(
            (1.0..=1000.0).contains(&self.rtt_ms),
            "RTT must be 1..=1000 ms",
        )?;
        ensure(
            (0.1..=10.0).contains(&self.buffer_bdp),
            "buffer must be 0.1..=10 BDP",
        )?;
        ensure(
            self.warmup_s >= 1.0 && self.measure_s >= 2.0,
            "warm-up ≥ 1 s, measure ≥ 2 s",
        )?;
        let w = mgrp_control::mpat_kernel::MAX_WINDOWS;
        ensure(
            (2..=w).contains(&self.weights.len()) && self.weights.iter().all(|&x| x >= 1),
            "weights: 2..=16 of them, each ≥ 1",
        )?;
        ensure(
            (1..=w).contains(&self.many_n),
            "many: 1..=16 MPAT flows (the kernel's windows per aggregate)",
        )?;
        ensure(
            self.weights_background <= 32 && self.many_background <= 32,
            "at most 32 background flows",
        )?;
        ensure(
            self.multcp_n.iter().all(|&n| (1..=10_000).contains(&n)),
            "mulTCP N must be 1..=10000",
        )?;
        ensure(
            self.ladder.iter().all(|&k| (1..=100_000).contains(&k)),
            "ladder k must be 1..=100000",
        )?;
        ensure(
            self.reweights.len() >= 2
                && self
                    .reweights
                    .iter()
                    .all(|s| s.len() == 3 && s.iter().all(|&x| x >= 1)),
            "reweights: at least two sets of three weights ≥ 1",
        )?;
        ensure(self.phase_s >= 4.0, "phase ≥ 4 s")?;
        ensure(
            self.cbr_mbit > 0.0 && self.cbr_mbit < self.capacity_mbit,
            "CBR must be below the capacity",
        )
    }
}

/// Bytes each flow's sink has read: (seconds since the flows started, bytes per flow).
pub type Samples = Vec<(f64, Vec<u64>)>;

/// Each flow's goodput between `from` and `to` seconds, bit/s (the samples nearest inside).
pub fn goodput(samples: &Samples, from: f64, to: f64) -> Vec<f64> {
    let at = |t: f64| samples.iter().rev().find(|s| s.0 <= t).or(samples.first());
    match (at(from), at(to)) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            a.1.iter()
                .zip(&b.1)
                .map(|(x, y)| y.saturating_sub(*x) as f64 * 8.0 / (b.0 - a.0))
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Jain's fairness index: 1 when all equal, 1/n when one takes everything.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * q)
}

/// Each flow's share of the group's goodput over its weight's share, minus one.
pub fn share_errors(got: &[f64], weights: &[u32]) -> Vec<f64> {
    let g: f64 = got.iter().sum();
    let w: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    got.iter()
        .zip(weights)
        .map(|(x, &wi)| (x / g) / (f64::from(wi) / w) - 1.0)
        .collect()
}

/// Seconds from `t0` until the first bin from which `ok(bin)` holds for [`HOLD_BINS`] bins in a
/// row (the bin's start), within `[t0, t1)`. `None` if it never does.
pub fn settle_time(
    samples: &Samples,
    t0: f64,
    t1: f64,
    ok: impl Fn(&[f64]) -> bool,
) -> Option<f64> {
    let n = ((t1 - t0) / BIN_S).floor() as usize;
    let good: Vec<bool> = (0..n)
        .map(|i| {
            let a = t0 + i as f64 * BIN_S;
            let g = goodput(samples, a, a + BIN_S);
            !g.is_empty() && ok(&g)
        })
        .collect();
    (0..n.saturating_sub(HOLD_BINS - 1))
        .find(|&i| good[i..i + HOLD_BINS].iter().all(|&b| b))
        .map(|i| i as f64 * BIN_S)
}

/// The path the runs used.
#[derive(Debug, Clone, Serialize)]
pub struct PathInfo {
    pub configured_mbit: f64,
    pub measured_mbit: f64,
    pub rtt_ms: f64,
    pub buffer_bdp: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WeightsResult {
    pub weights: Vec<u32>,
    pub member_mbit: Vec<f64>,
    /// Goodput over the weight-1 (first) member's.
    pub ratios: Vec<f64>,
    pub worst_share_error: f64,
    pub background_mbit: Vec<f64>,
    /// Aggregate / (N × all TCP goodput / all flows).
    pub aggregate_fair_shares: f64,
    /// Aggregate / (N × mean background flow).
    pub aggregate_vs_background: f64,
    pub background_jain: f64,
    pub refused: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ManyResult {
    /// `mpat` or `multcp`.
    pub kind: String,
    pub n: u32,
    pub background: usize,
    pub ours_mbit: f64,
    /// Ours / mean background flow: the number of TCP shares taken (target N).
    pub shares: f64,
    /// Ours / (N × total / (N + B)): 1 = exactly N fair shares.
    pub fair_shares: f64,
    pub background_jain: f64,
    pub member_jain: Option<f64>,
    pub refused: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LadderStep {
    pub k: u32,
    pub weights: Vec<u32>,
    pub member_mbit: Vec<f64>,
    pub max_over_min: f64,
    /// max/min over k, minus one.
    pub error: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReweightChange {
    pub at_s: f64,
    pub from: Vec<u32>,
    pub to: Vec<u32>,
    /// Seconds until the shares held within 10 % for 1 s (bins of 250 ms); `None`: never.
    pub settle_s: Option<f64>,
    /// Over the phase's second half.
    pub worst_share_error: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CbrResult {
    pub weights: Vec<u32>,
    pub cbr_mbit: f64,
    pub aggregate_before_mbit: f64,
    pub aggregate_after_mbit: f64,
    pub background_before_mbit: f64,
    pub background_after_mbit: f64,
    /// Seconds from the CBR's start until the aggregate stayed within 10 % of its later mean.
    pub cut_s: Option<f64>,
    pub worst_share_error_before: f64,
    pub worst_share_error_after: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct MpatReport {
    pub path: Option<PathInfo>,
    pub weights: Option<WeightsResult>,
    pub many: Vec<ManyResult>,
    pub ladder: Vec<LadderStep>,
    pub reweight: Vec<ReweightChange>,
    pub cbr: Option<CbrResult>,
    pub notes: Vec<String>,
}

/// One flow to run: its port and congestion control.
#[derive(Debug, Clone, Copy)]
struct Flow {
    port: u16,
    cc: &'static str,
}

struct Bench<'a> {
    tb: Testbed,
    kernel: MpatControls,
    next_port: u16,
    hooks: Hooks<'a>,
}

impl Bench<'_> {
    fn ports(&mut self, n: usize) -> Vec<u16> {
        let p: Vec<u16> = (0..n as u16).map(|i| self.next_port + i).collect();
        self.next_port += n as u16;
        p
    }

    fn rcv(&self) -> IpAddr {
        Role::Rcv.addr().parse().expect("the testbed's address")
    }

    fn rule(&self, port: u16) -> MemberRule {
        MemberRule {
            dst: Some(self.rcv()),
            port: Some(port),
        }
    }

    /// An aggregate of members on these ports with these weights.
    fn aggregate(&self, ports: &[u16], weights: &[u32]) -> Result<u32> {
        let id = self.kernel.create_aggregate().map_err(kernel)?;
        for (&p, &w) in ports.iter().zip(weights) {
            self.kernel
                .add_member(id, self.rule(p), w)
                .map_err(kernel)?;
        }
        Ok(id)
    }

    /// Run `flows` for `secs`; `tick(self, t)` after each sample.
    fn run(
        &mut self,
        flows: &[Flow],
        secs: f64,
        mut tick: impl FnMut(&Bench<'_>, f64) -> Result<()>,
    ) -> Result<Samples> {
        let mut running = Vec::new();
        let max = Duration::from_secs_f64(secs + 30.0);
        for f in flows {
            let ends = Endpoints {
                src_ns: self.tb.ns(Role::Snd),
                dst_ns: self.tb.ns(Role::Rcv),
                dst: format!("{}:{}", Role::Rcv.addr(), f.port)
                    .parse()
                    .expect("valid address"),
            };
            running.push(BulkFlow::start(&ends, f.cc, max)?);
        }
        let start = Instant::now();
        let mut samples: Samples = vec![(0.0, vec![0; flows.len()])];
        let base: Vec<u64> = running.iter().map(BulkFlow::received_bytes).collect();
        let mut next = SAMPLE;
        while start.elapsed().as_secs_f64() < secs {
            if (self.hooks.stop)() {
                return Err(Error::Interrupted);
            }
            std::thread::sleep(next.saturating_sub(start.elapsed()));
            next += SAMPLE;
            let t = start.elapsed().as_secs_f64();
            let bytes = running
                .iter()
                .zip(&base)
                .map(|(f, b)| f.received_bytes() - b)
                .collect();
            samples.push((t, bytes));
            tick(self, t)?;
        }
        // The figures are the samples, taken. A sender whose sink closed first on the stop
        // (the sink and the sender see it at once) fails its last write with EPIPE: not a
        // failure of the run.
        for f in running {
            let _ = f.stop();
        }
        Ok(samples)
    }
}

fn kernel(e: mgrp_control::Error) -> Error {
    Error::Unavailable(format!("MPAT: {e}"))
}

fn mbit(bps: f64) -> f64 {
    (bps / 1e4).round() / 100.0
}

fn worst(e: &[f64]) -> f64 {
    e.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

pub fn run(cfg: &MpatBenchConfig, hooks: Hooks) -> Result<MpatReport> {
    cfg.check()?;
    let rtt = Duration::from_secs_f64(cfg.rtt_ms / 1e3);
    hooks.say(&format!(
        "mpat: testbed {} Mbit/s, RTT {} ms, buffer {} BDP\n",
        cfg.capacity_mbit, cfg.rtt_ms, cfg.buffer_bdp
    ));
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: (cfg.capacity_mbit * 1e6) as u64,
            buffer: Buffer::Time(rtt.mul_f64(cfg.buffer_bdp)),
            delay: Some(rtt),
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    for role in [Role::Snd, Role::Rcv] {
        tcp_sysctls(&tb.ns(role), true)?;
    }
    let kernel = MpatControls::load().map_err(self::kernel)?;
    let mut report = MpatReport {
        path: Some(PathInfo {
            configured_mbit: cfg.capacity_mbit,
            measured_mbit: mbit(tb.capacity().bps()),
            rtt_ms: cfg.rtt_ms,
            buffer_bdp: cfg.buffer_bdp,
        }),
        ..Default::default()
    };
    let mut b = Bench {
        tb,
        kernel,
        next_port: 7700,
        hooks,
    };
    for s in &cfg.scenarios {
        match s {
            MpatScenario::Weights => report.weights = Some(weights(&mut b, cfg)?),
            MpatScenario::Many => report.many = many(&mut b, cfg)?,
            MpatScenario::Ladder => report.ladder = ladder(&mut b, cfg)?,
            MpatScenario::Reweight => report.reweight = reweight(&mut b, cfg)?,
            MpatScenario::Cbr => report.cbr = Some(cbr(&mut b, cfg)?),
        }
    }
    report.notes.push(format!(
        "the kernel aggregate holds at most {} flows, so `many` runs MPAT with N = {} (the seed: 100)",
        mgrp_control::mpat_kernel::MAX_WINDOWS,
        cfg.many_n
    ));
    Ok(report)
}

/// `n` members on new ports, then `bg` CUBIC flows.
fn members_and_background(b: &mut Bench<'_>, n: usize, bg: usize, cc: &'static str) -> Vec<Flow> {
    let ports = b.ports(n + bg);
    ports
        .iter()
        .enumerate()
        .map(|(i, &port)| Flow {
            port,
            cc: if i < n { cc } else { "cubic" },
        })
        .collect()
}

fn weights(b: &mut Bench<'_>, cfg: &MpatBenchConfig) -> Result<WeightsResult> {
    let n = cfg.weights.len();
    b.hooks.say(&format!(
        "mpat weights {:?} against {} CUBIC\n",
        cfg.weights, cfg.weights_background
    ));
    let flows = members_and_background(b, n, cfg.weights_background, "mgrp_mpat");
    let ports: Vec<u16> = flows[..n].iter().map(|f| f.port).collect();
    let id = b.aggregate(&ports, &cfg.weights)?;
    let end = cfg.warmup_s + cfg.measure_s;
    let s = b.run(&flows, end + 0.2, |_, _| Ok(()))?;
    let refused = b.kernel.aggregate_stats(id).map_or(0, |a| a.refused);
    b.kernel.remove_aggregate(id).map_err(kernel)?;
    let g = goodput(&s, cfg.warmup_s, end);
    let (ours, bg) = g.split_at(n);
    let total: f64 = g.iter().sum();
    let agg: f64 = ours.iter().sum();
    let mean_bg = bg.iter().sum::<f64>() / bg.len().max(1) as f64;
    Ok(WeightsResult {
        weights: cfg.weights.clone(),
        member_mbit: ours.iter().map(|&x| mbit(x)).collect(),
        ratios: ours.iter().map(|x| x / ours[0]).collect(),
        worst_share_error: worst(&share_errors(ours, &cfg.weights)),
        background_mbit: bg.iter().map(|&x| mbit(x)).collect(),
        aggregate_fair_shares: agg / (n as f64 * total / g.len() as f64),
        aggregate_vs_background: agg / (n as f64 * mean_bg),
        background_jain: jain(bg),
        refused,
    })
}

fn many(b: &mut Bench<'_>, cfg: &MpatBenchConfig) -> Result<Vec<ManyResult>> {
    let mut out = Vec::new();
    let end = cfg.warmup_s + cfg.measure_s;
    let bgn = cfg.many_background;
    let summary = |kind: &str, n: u32, ours: &[f64], bg: &[f64], refused| {
        let agg: f64 = ours.iter().sum();
        let total = agg + bg.iter().sum::<f64>();
        let mean_bg = bg.iter().sum::<f64>() / bg.len().max(1) as f64;
        ManyResult {
            kind: kind.into(),
            n,
            background: bg.len(),
            ours_mbit: mbit(agg),
            shares: agg / mean_bg,
            fair_shares: agg / (f64::from(n) * total / (f64::from(n) + bg.len() as f64)),
            background_jain: jain(bg),
            member_jain: (ours.len() > 1).then(|| jain(ours)),
            refused,
        }
    };
    let n = cfg.many_n;
    b.hooks
        .say(&format!("mpat many: {n} MPAT flows against {bgn} CUBIC\n"));
    let flows = members_and_background(b, n, bgn, "mgrp_mpat");
    let ports: Vec<u16> = flows[..n].iter().map(|f| f.port).collect();
    let id = b.aggregate(&ports, &vec![1; n])?;
    let s = b.run(&flows, end + 0.2, |_, _| Ok(()))?;
    let refused = b.kernel.aggregate_stats(id).map_or(0, |a| a.refused);
    b.kernel.remove_aggregate(id).map_err(kernel)?;
    let g = goodput(&s, cfg.warmup_s, end);
    out.push(summary("mpat", n as u32, &g[..n], &g[n..], refused));
    for &m in &cfg.multcp_n {
        b.hooks
            .say(&format!("mpat many: mulTCP N = {m} against {bgn} CUBIC\n"));
        b.kernel.set_multcp_n(m).map_err(kernel)?;
        let flows = members_and_background(b, 1, bgn, "mgrp_multcp");
        let s = b.run(&flows, end + 0.2, |_, _| Ok(()))?;
        let g = goodput(&s, cfg.warmup_s, end);
        out.push(summary("multcp", m, &g[..1], &g[1..], 0));
    }
    Ok(out)
}

fn ladder(b: &mut Bench<'_>, cfg: &MpatBenchConfig) -> Result<Vec<LadderStep>> {
    let mut out = Vec::new();
    let end = cfg.warmup_s + cfg.ladder_measure_s;
    for &k in &cfg.ladder {
        let w = vec![1, (f64::from(k).sqrt().round() as u32).max(1), k];
        b.hooks.say(&format!("mpat ladder: weights {w:?}\n"));
        let flows = members_and_background(b, 3, 0, "mgrp_mpat");
        let ports: Vec<u16> = flows.iter().map(|f| f.port).collect();
        let id = b.aggregate(&ports, &w)?;
        let s = b.run(&flows, end + 0.2, |_, _| Ok(()))?;
        b.kernel.remove_aggregate(id).map_err(kernel)?;
        let g = goodput(&s, cfg.warmup_s, end);
        let r = g[2] / g[0];
        out.push(LadderStep {
            k,
            weights: w,
            member_mbit: g.iter().map(|&x| mbit(x)).collect(),
            max_over_min: r,
            error: r / f64::from(k) - 1.0,
        });
    }
    Ok(out)
}

fn reweight(b: &mut Bench<'_>, cfg: &MpatBenchConfig) -> Result<Vec<ReweightChange>> {
    let sets = &cfg.reweights;
    b.hooks.say(&format!(
        "mpat reweight: {sets:?}, {} s each, 2 CUBIC\n",
        cfg.phase_s
    ));
    let flows = members_and_background(b, 3, 2, "mgrp_mpat");
    let ports: Vec<u16> = flows[..3].iter().map(|f| f.port).collect();
    let id = b.aggregate(&ports, &sets[0])?;
    // Phase i starts at warm-up + i·phase; the first phase is the starting weights.
    let t_change = |i: usize| cfg.warmup_s + i as f64 * cfg.phase_s;
    let total = t_change(sets.len());
    let mut done = 1;
    let mut at = vec![0.0; sets.len()];
    let s = b.run(&flows, total + 0.2, |bench, t| {
        if done < sets.len() && t >= t_change(done) {
            for (&p, &w) in ports.iter().zip(&sets[done]) {
                bench.kernel.set_weight(bench.rule(p), w).map_err(kernel)?;
            }
            at[done] = t;
            done += 1;
        }
        Ok(())
    })?;
    b.kernel.remove_aggregate(id).map_err(kernel)?;
    let mut out = Vec::new();
    for i in 1..done {
        let (t0, t1) = (at[i], t_change(i + 1));
        let w = &sets[i];
        let settle = settle_time(&s, t0, t1, |g| worst(&share_errors(&g[..3], w)) <= TOL);
        let g = goodput(&s, (t0 + t1) / 2.0, t1);
        out.push(ReweightChange {
            at_s: t0,
            from: sets[i - 1].clone(),
            to: w.clone(),
            settle_s: settle,
            worst_share_error: worst(&share_errors(&g[..3], w)),
        });
    }
    Ok(out)
}

fn cbr(b: &mut Bench<'_>, cfg: &MpatBenchConfig) -> Result<CbrResult> {
    let w = vec![1, 2, 3];
    b.hooks.say(&format!(
        "mpat cbr: {w:?} and 2 CUBIC, {} Mbit/s CBR after {} s\n",
        cfg.cbr_mbit,
        cfg.warmup_s + cfg.measure_s
    ));
    let flows = members_and_background(b, 3, 2, "mgrp_mpat");
    let ports: Vec<u16> = flows[..3].iter().map(|f| f.port).collect();
    let id = b.aggregate(&ports, &w)?;
    let t_cbr = cfg.warmup_s + cfg.measure_s;
    let end = t_cbr + cfg.measure_s;
    let pattern = CrossPattern::Cbr {
        rate_bps: (cfg.cbr_mbit * 1e6) as u64,
        size: 1500,
    };
    let port = b.ports(1)[0];
    let mut cross: Option<CrossTraffic> = None;
    let mut started = None;
    let s = b.run(&flows, end + 0.2, |bench, t| {
        if cross.is_none() && t >= t_cbr {
            cross = Some(CrossTraffic::start(
                &bench.tb,
                &pattern,
                port,
                &GenOptions::default(),
            )?);
            started = Some(t);
        }
        Ok(())
    })?;
    if let Some(c) = cross {
        c.stop()?;
    }
    b.kernel.remove_aggregate(id).map_err(kernel)?;
    let t0 = started.unwrap_or(t_cbr);
    let before = goodput(&s, cfg.warmup_s, t0);
    // The later mean leaves out the first quarter after the CBR's start (the transition).
    let after = goodput(&s, t0 + cfg.measure_s / 4.0, end);
    let sum = |g: &[f64], r: std::ops::Range<usize>| g[r].iter().sum::<f64>();
    let agg_after = sum(&after, 0..3);
    let cut = settle_time(&s, t0, end, |g| {
        (g[..3].iter().sum::<f64>() / agg_after - 1.0).abs() <= TOL * 2.0
    });
    Ok(CbrResult {
        weights: w.clone(),
        cbr_mbit: cfg.cbr_mbit,
        aggregate_before_mbit: mbit(sum(&before, 0..3)),
        aggregate_after_mbit: mbit(agg_after),
        background_before_mbit: mbit(sum(&before, 3..5)),
        background_after_mbit: mbit(sum(&after, 3..5)),
        cut_s: cut,
        worst_share_error_before: worst(&share_errors(&before[..3], &w)),
        worst_share_error_after: worst(&share_errors(&after[..3], &w)),
    })
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or("never".into(), |x| format!("{x:.2} {unit}"))
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// The readable tables (Markdown).
pub fn tables(r: &MpatReport) -> String {
    let mut t = Vec::new();
    if let Some(p) = &r.path {
        t.push(format!(
            "Path: {} Mbit/s configured, {} measured, RTT {} ms, buffer {} BDP; truth = goodput at the receiver.\n",
            p.configured_mbit, p.measured_mbit, p.rtt_ms, p.buffer_bdp
        ));
    }
    if let Some(w) = &r.weights {
        t.push(format!(
            "### 1. Weights {:?} against {} CUBIC flows\n\n| | result | seed |\n|---|---|---|",
            w.weights,
            w.background_mbit.len()
        ));
        let ratios: Vec<String> = w.ratios.iter().map(|x| format!("{x:.2}")).collect();
        t.push(format!(
            "| ratios to the weight-1 flow | {} | 1 : 1.96 : 2.93 : 3.93 : 4.74 |",
            ratios.join(" : ")
        ));
        t.push(format!(
            "| worst share error | {} | |",
            pct(w.worst_share_error)
        ));
        t.push(format!("| members, Mbit/s | {:?} | |", w.member_mbit));
        t.push(format!(
            "| background, Mbit/s | {:?} | |",
            w.background_mbit
        ));
        t.push(format!(
            "| aggregate / N fair shares | {:.2} | ≈ 1 |",
            w.aggregate_fair_shares
        ));
        t.push(format!(
            "| aggregate / (N × mean CUBIC) | {:.2} | |",
            w.aggregate_vs_background
        ));
        t.push(format!(
            "| background Jain | {:.3} | ≥ 0.95 (target) |\n",
            w.background_jain
        ));
    }
    if !r.many.is_empty() {
        t.push("### 2. Many flows: MPAT aggregate and mulTCP against CUBIC\n\n| kind | N | background | Mbit/s | shares taken (ours / mean CUBIC) | / N fair shares | background Jain | members' Jain |\n|---|---|---|---|---|---|---|---|".into());
        for m in &r.many {
            t.push(format!(
                "| {} | {} | {} | {} | {:.1} | {:.2} | {:.3} | {} |",
                m.kind,
                m.n,
                m.background,
                m.ours_mbit,
                m.shares,
                m.fair_shares,
                m.background_jain,
                m.member_jain.map_or("-".into(), |j| format!("{j:.3}"))
            ));
        }
        t.push("\n(seed: an aggregate of 100 MPAT flows holds 100 shares against 10 background flows; mulTCP with N = 100 only 20–25.)\n".into());
    }
    if !r.ladder.is_empty() {
        t.push("### 3. Three flows 1 : √k : k\n\n| k | weights | Mbit/s | max/min | error |\n|---|---|---|---|---|".into());
        for l in &r.ladder {
            t.push(format!(
                "| {} | {:?} | {:?} | {:.1} | {} |",
                l.k,
                l.weights,
                l.member_mbit,
                l.max_over_min,
                pct(l.error)
            ));
        }
        t.push("\n(seed: followed up to 95:1.)\n".into());
    }
    if !r.reweight.is_empty() {
        t.push("### 4. Weights changed mid-run (3 members, 2 CUBIC)\n\n| at | from → to | shares within 10 % for 1 s after | worst share error, phase's 2nd half |\n|---|---|---|---|".into());
        for c in &r.reweight {
            t.push(format!(
                "| {:.1} s | {:?} → {:?} | {} | {} |",
                c.at_s,
                c.from,
                c.to,
                opt(c.settle_s, "s"),
                pct(c.worst_share_error)
            ));
        }
        t.push("\n(bins of 250 ms: 0.00 s means the first bin after the change already held; seed: 2–3 RTT.)\n".into());
    }
    if let Some(c) = &r.cbr {
        t.push(format!(
            "### 5. {} Mbit/s CBR added mid-run ({:?} + 2 CUBIC)\n\n| | before | after |\n|---|---|---|",
            c.cbr_mbit, c.weights
        ));
        t.push(format!(
            "| aggregate, Mbit/s | {} | {} |",
            c.aggregate_before_mbit, c.aggregate_after_mbit
        ));
        t.push(format!(
            "| background, Mbit/s | {} | {} |",
            c.background_before_mbit, c.background_after_mbit
        ));
        t.push(format!(
            "| worst share error | {} | {} |",
            pct(c.worst_share_error_before),
            pct(c.worst_share_error_after)
        ));
        t.push(format!(
            "| aggregate within 20 % of its later mean after | | {} |\n\n(seed: cut in 4–6 RTT, ratio held.)\n",
            opt(c.cut_s, "s")
        ));
    }
    for n in &r.notes {
        t.push(format!("Note: {n}."));
    }
    t.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(rates: &[f64], secs: f64) -> Samples {
        // Flows at constant rates (bytes/s), sampled every 100 ms.
        (0..=(secs * 10.0) as usize)
            .map(|i| {
                let t = i as f64 / 10.0;
                (t, rates.iter().map(|r| (r * t) as u64).collect())
            })
            .collect()
    }

    #[test]
    fn goodput_jain_and_share_errors() {
        let s = ramp(&[1e6, 2e6], 10.0);
        let g = goodput(&s, 2.0, 8.0);
        assert!(
            (g[0] - 8e6).abs() < 1.0 && (g[1] - 16e6).abs() < 1.0,
            "{g:?}"
        );
        assert_eq!(jain(&[5.0, 5.0, 5.0]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        let e = share_errors(&[1.0, 2.0, 3.3], &[1, 2, 3]);
        assert!((e[2] - (3.3 / 6.3 / 0.5 - 1.0)).abs() < 1e-12, "{e:?}");
        assert!(goodput(&s, 8.0, 8.0).is_empty());
    }

    #[test]
    fn settle_time_finds_the_first_held_second() {
        // 1:1 until 5 s, then 1:3 from 6.5 s on (a linear change between).
        let s: Samples = (0..=100)
            .scan((0u64, 0u64), |acc, i| {
                let t = i as f64 / 10.0;
                let b = if t <= 5.0 {
                    1000
                } else if t < 6.5 {
                    2000
                } else {
                    3000
                };
                if i > 0 {
                    acc.0 += 1000;
                    acc.1 += b;
                }
                Some((t, vec![acc.0, acc.1]))
            })
            .collect();
        let w = [1, 3];
        let t = settle_time(&s, 5.0, 10.0, |g| worst(&share_errors(g, &w)) <= TOL).unwrap();
        assert!((t - 1.5).abs() < 1e-9, "{t}");
        assert_eq!(
            settle_time(&s, 0.0, 4.0, |g| worst(&share_errors(g, &w)) <= TOL),
            None
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(MpatBenchConfig::standard().check().is_ok());
        assert!(MpatBenchConfig::quick().check().is_ok());
        let mut c = MpatBenchConfig::standard();
        c.many_n = 100;
        assert!(c.check().unwrap_err().to_string().contains("1..=16"));
        let mut c = MpatBenchConfig::standard();
        c.weights = vec![1, 0];
        assert!(c.check().is_err());
        let mut c = MpatBenchConfig::standard();
        c.cbr_mbit = 100.0;
        assert!(c.check().is_err());
        assert!(MpatScenario::parse("nope").is_err());
    }
}

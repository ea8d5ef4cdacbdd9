//! The full-speed scenarios on the default testbed path (snd → r1 ═ r2 → rcv, delay on the
//! reverse path): a high-BDP path (seed 001 §5.6) and a slow lossy one (§5.7).

use super::flow::{tcp_sysctls, BulkFlow, TcpStats};
use super::metrics::{first_sustained, ratio, Spread, HOLD_BINS};
use super::{
    buffer_text, ccs_of, each_cc, mbit, ok_figures, pause_until, secs_ns, Brief, ModesConfig,
    PathInfo, Run, Scenario, ScenarioReport, SetupCtx, Setups, SummaryHead,
};
use crate::{Hooks, Result};
use mgrp_testbed::generator::Endpoints;
use mgrp_testbed::{
    Buffer, DelayMode, LossModel, Role, Testbed, TestbedConfig, Truth, TruthSampler,
};
use serde::Serialize;
use std::time::Duration;

/// Truth bins: the resolution of the time to 90%.
const BIN: Duration = Duration::from_millis(100);
/// Port of the flow's sink on rcv.
const PORT: u16 = 5410;

/// A single-bottleneck path of `capacity_mbit`, `rtt_ms` of reverse-path delay, a queue of
/// `buffer_bdp` bandwidth-delay products and optional loss on the flow's forward path; its
/// end hosts' TCP buffers raised so the window is never what limits the flow.
fn path_up(
    capacity_mbit: f64,
    rtt_ms: f64,
    buffer_bdp: f64,
    loss: Option<LossModel>,
) -> Result<Testbed> {
    let rtt = Duration::from_secs_f64(rtt_ms / 1e3);
    let tb = Testbed::up(
        TestbedConfig {
            capacity_bps: (capacity_mbit * 1e6) as u64,
            buffer: Buffer::Time(rtt.mul_f64(buffer_bdp)),
            delay: Some(rtt),
            loss,
            ..Default::default()
        },
        DelayMode::Thread,
    )?;
    for role in [Role::Snd, Role::Rcv] {
        tcp_sysctls(&tb.ns(role), true)?;
    }
    Ok(tb)
}

fn info(tb: &Testbed, rtt_ms: f64) -> PathInfo {
    let c = tb.config();
    PathInfo {
        testbed: format!("default path ({})", tb.name()),
        bottleneck: "r1→r2".into(),
        configured_mbit: mbit(c.capacity_bps as f64),
        measured_mbit: mbit(tb.capacity().bps()),
        rtt_ms,
        buffer: buffer_text(c.buffer, c.capacity_bps),
        loss: c.loss.as_ref().map(|l| l.to_string()),
        access_measured_mbit: Vec::new(),
    }
}

fn ctx(tb: &Testbed, scenario: Scenario, rtt_ms: f64) -> SetupCtx {
    let addr = |r: Role| r.addr().parse().expect("the testbed's addresses are valid");
    SetupCtx {
        cc: String::new(),
        scenario,
        sender_ns: tb.ns(Role::Snd),
        sender_addr: addr(Role::Snd),
        receiver_ns: tb.ns(Role::Rcv),
        receiver_addr: addr(Role::Rcv),
        rtt: Duration::from_secs_f64(rtt_ms / 1e3),
        capacity_bps: tb.capacity().bps(),
    }
}

fn ends(tb: &Testbed) -> Endpoints {
    Endpoints {
        src_ns: tb.ns(Role::Snd),
        dst_ns: tb.ns(Role::Rcv),
        dst: format!("{}:{PORT}", Role::Rcv.addr())
            .parse()
            .expect("valid address"),
    }
}

/// A bulk flow for `secs` on `cc`, with the bottleneck's truth over it.
struct Ran {
    start_ns: u64,
    secs: f64,
    received_bytes: u64,
    tcp: TcpStats,
    truth: Truth,
}

fn bulk(tb: &Testbed, cc: &str, secs: f64, hooks: Hooks) -> Result<Ran> {
    let sampler = TruthSampler::start(tb, BIN)?;
    let flow = BulkFlow::start(&ends(tb), cc, Duration::from_secs_f64(secs + 10.0))?;
    let start_ns = flow.start_ns();
    pause_until(hooks, start_ns + secs_ns(secs))?;
    let end = flow.stop()?;
    Ok(Ran {
        start_ns,
        secs: end.secs,
        received_bytes: end.received_bytes,
        tcp: end.tcp,
        truth: sampler.stop()?,
    })
}

/// The flow's delivery past the bottleneck in [`BIN`]s over its first `secs`.
fn delivered_series(r: &Ran, secs: f64) -> Vec<f64> {
    let step = BIN.as_nanos() as u64;
    let end = r.start_ns + secs_ns(secs);
    (0..)
        .map(|k| r.start_ns + k * step)
        .take_while(|t| t + step <= end)
        .map(|t| r.truth.window(t, t + step).map_or(f64::NAN, |b| b.fg_bps))
        .collect()
}

/// One high-BDP run.
#[derive(Debug, Clone, Serialize)]
pub struct HighBdpFigures {
    /// From the connection's start until delivery at the bottleneck holds ≥ 90% of the measured
    /// capacity (over 0.5 s); `None` if it never did in the run.
    pub time_to_90_s: Option<f64>,
    /// Delivered at the bottleneck over the run / measured capacity.
    pub utilisation: f64,
    /// Payload bytes the receiver read per second of the run.
    pub goodput_mbit: f64,
    pub tcp: TcpStats,
}

impl Brief for HighBdpFigures {
    fn brief(&self) -> String {
        format!(
            "90% after {}, utilisation {:.0}%, {} retransmits",
            self.time_to_90_s
                .map_or("never".into(), |t| format!("{t:.1} s")),
            self.utilisation * 100.0,
            self.tcp.retrans
        )
    }
}

fn high_bdp_run(tb: &Testbed, secs: f64, cc: &str, hooks: Hooks) -> Result<HighBdpFigures> {
    let r = bulk(tb, cc, secs, hooks)?;
    let c = tb.capacity().bps();
    let series = delivered_series(&r, secs);
    let mean = series.iter().filter(|x| x.is_finite()).sum::<f64>() / series.len().max(1) as f64;
    Ok(HighBdpFigures {
        time_to_90_s: first_sustained(&series, BIN.as_secs_f64(), 0.9 * c, HOLD_BINS),
        utilisation: mean / c,
        goodput_mbit: mbit(r.received_bytes as f64 * 8.0 / r.secs.max(1e-9)),
        tcp: r.tcp,
    })
}

/// A high-BDP row per CC.
#[derive(Debug, Clone, Serialize)]
pub struct HighBdpSummary {
    #[serde(flatten)]
    pub head: SummaryHead,
    /// Over the runs that got there ([`Self::reached`] of them).
    pub time_to_90_s: Option<Spread>,
    pub reached: usize,
    pub utilisation: Option<Spread>,
    pub retrans: Option<Spread>,
}

fn high_bdp_summary(runs: &[Run<HighBdpFigures>]) -> Vec<HighBdpSummary> {
    ccs_of(runs)
        .iter()
        .map(|cc| {
            let mine: Vec<&Run<HighBdpFigures>> = runs.iter().filter(|r| &r.cc == cc).collect();
            let f = ok_figures(&mine);
            HighBdpSummary {
                head: SummaryHead::of(cc, None, &mine),
                time_to_90_s: Spread::of(f.iter().filter_map(|x| x.time_to_90_s)),
                reached: f.iter().filter(|x| x.time_to_90_s.is_some()).count(),
                utilisation: Spread::of(f.iter().map(|x| x.utilisation)),
                retrans: Spread::of(f.iter().map(|x| x.tcp.retrans as f64)),
            }
        })
        .collect()
}

/// Scenario 3: one flow per CC on a high-BDP path with a one-BDP queue.
pub fn high_bdp(
    cfg: &ModesConfig,
    setups: &Setups,
    hooks: Hooks,
) -> Result<ScenarioReport<HighBdpFigures, HighBdpSummary>> {
    let h = &cfg.high_bdp;
    hooks.say(&format!(
        "modes high-bdp: {} Mbit/s, RTT {} ms, queue {} BDP\n",
        h.capacity_mbit, h.rtt_ms, h.buffer_bdp
    ));
    let tb = path_up(h.capacity_mbit, h.rtt_ms, h.buffer_bdp, None)?;
    let ctx = ctx(&tb, Scenario::HighBdp, h.rtt_ms);
    let runs = each_cc(&cfg.full_speed_ccs, cfg.repeat, setups, &ctx, hooks, |cc| {
        high_bdp_run(&tb, h.secs, cc, hooks)
    })?;
    Ok(ScenarioReport {
        paths: vec![info(&tb, h.rtt_ms)],
        summary: high_bdp_summary(&runs),
        runs,
    })
}

/// One lossy run.
#[derive(Debug, Clone, Serialize)]
pub struct LossyFigures {
    pub loss_pct: f64,
    /// Payload bytes the receiver read per second of the run.
    pub goodput_mbit: f64,
    pub tcp: TcpStats,
}

impl Brief for LossyFigures {
    fn brief(&self) -> String {
        format!(
            "loss {}%: goodput {:.2} Mbit/s, {} retransmits",
            self.loss_pct, self.goodput_mbit, self.tcp.retrans
        )
    }
}

fn lossy_run(
    tb: &Testbed,
    loss_pct: f64,
    secs: f64,
    cc: &str,
    hooks: Hooks,
) -> Result<LossyFigures> {
    let r = bulk(tb, cc, secs, hooks)?;
    Ok(LossyFigures {
        loss_pct,
        goodput_mbit: mbit(r.received_bytes as f64 * 8.0 / r.secs.max(1e-9)),
        tcp: r.tcp,
    })
}

/// A lossy row per (loss rate, CC).
#[derive(Debug, Clone, Serialize)]
pub struct LossySummary {
    #[serde(flatten)]
    pub head: SummaryHead,
    pub goodput_mbit: Option<Spread>,
    pub retrans: Option<Spread>,
    /// Median goodput over Reno's at the same loss (when Reno ran).
    pub vs_reno: Option<f64>,
}

fn lossy_summary(loss_pct: f64, runs: &[Run<LossyFigures>]) -> Vec<LossySummary> {
    let mut out: Vec<LossySummary> = ccs_of(runs)
        .iter()
        .map(|cc| {
            let mine: Vec<&Run<LossyFigures>> = runs.iter().filter(|r| &r.cc == cc).collect();
            let f = ok_figures(&mine);
            LossySummary {
                head: SummaryHead::of(cc, Some(loss_pct), &mine),
                goodput_mbit: Spread::of(f.iter().map(|x| x.goodput_mbit)),
                retrans: Spread::of(f.iter().map(|x| x.tcp.retrans as f64)),
                vs_reno: None,
            }
        })
        .collect();
    let reno = out
        .iter()
        .find(|s| s.head.cc == "reno")
        .and_then(|s| s.goodput_mbit.map(|g| g.median));
    for s in &mut out {
        s.vs_reno = ratio(s.goodput_mbit.map(|g| g.median), reno);
    }
    out
}

/// Scenario 4: one flow per CC and loss rate on a slow lossy path (a path per loss rate).
pub fn lossy(
    cfg: &ModesConfig,
    setups: &Setups,
    hooks: Hooks,
) -> Result<ScenarioReport<LossyFigures, LossySummary>> {
    let l = &cfg.lossy;
    let mut report = ScenarioReport {
        paths: Vec::new(),
        runs: Vec::new(),
        summary: Vec::new(),
    };
    for &pct in &l.losses_pct {
        hooks.say(&format!(
            "modes lossy: {} Mbit/s, RTT {} ms, random loss {pct}%\n",
            l.capacity_mbit, l.rtt_ms
        ));
        let loss = LossModel::Random { p: pct / 100.0 };
        let tb = path_up(l.capacity_mbit, l.rtt_ms, 1.0, Some(loss))?;
        let ctx = ctx(&tb, Scenario::Lossy, l.rtt_ms);
        let runs = each_cc(&cfg.full_speed_ccs, cfg.repeat, setups, &ctx, hooks, |cc| {
            lossy_run(&tb, pct, l.secs, cc, hooks)
        })?;
        report.paths.push(info(&tb, l.rtt_ms));
        report.summary.extend(lossy_summary(pct, &runs));
        report.runs.extend(runs);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes_bench::Status;

    fn row(cc: &str, goodput: f64) -> Run<LossyFigures> {
        Run {
            cc: cc.into(),
            rep: 1,
            status: Status::Ok,
            reason: None,
            figures: Some(LossyFigures {
                loss_pct: 1.0,
                goodput_mbit: goodput,
                tcp: TcpStats::default(),
            }),
        }
    }

    #[test]
    fn lossy_ratios_are_to_renos_median() {
        let runs = vec![
            row("reno", 1.0),
            row("reno", 1.2),
            row("reno", 0.8),
            row("mgrp_fs", 1.65),
        ];
        let s = lossy_summary(1.0, &runs);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].vs_reno, Some(1.0));
        assert!((s[1].vs_reno.unwrap() - 1.65).abs() < 1e-12);
        assert_eq!(s[0].head.runs, 3);
        // Without Reno there is nothing to compare with.
        assert_eq!(lossy_summary(1.0, &runs[3..])[0].vs_reno, None);
    }
}

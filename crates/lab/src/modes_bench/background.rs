//! The background and web scenarios on the `access_bg` topology: four foreground senders behind
//! their own access links, a background host, one shared link, RTT 40 ms (seed 001 §5.5).

use super::flow::{tcp_sysctls, BulkFlow, TcpStats};
use super::metrics::{first_sustained, ratio, spare_share, Completion, Spread, HOLD_BINS};
use super::{
    buffer_text, ccs_of, each_cc, mbit, ok_figures, pause_until, secs_ns, Brief, ModesConfig,
    PathInfo, Run, Scenario, ScenarioReport, SetupCtx, Setups, SummaryHead,
};
use crate::{Error, Hooks, Result};
use mgrp_testbed::clock::now_ns;
use mgrp_testbed::generator::{CrossTraffic, Endpoints, GenOptions, GenReport, BASE_PORT};
use mgrp_testbed::topo::{self, LinkDir, TopoOptions, TopoTestbed, TopoTruth, TopoTruthSampler};
use mgrp_testbed::CrossPattern;
use serde::Serialize;
use std::time::Duration;

const TOPOLOGY: &str = "access_bg";
/// Truth bins: the resolution of recovery.
const BIN: Duration = Duration::from_millis(100);
/// Port of the background flow's sink on rcv (the foreground uses BASE_PORT + i).
const BG_PORT: u16 = 5400;

/// The built topology and where its parts are.
struct AccessPath {
    tb: TopoTestbed,
    /// The foreground senders (the file's flows' sources), the background host, the receiver.
    senders: Vec<usize>,
    bg: usize,
    rcv: usize,
    /// Indices into the truth's directions: the shared link, and each sender's access link.
    shared: usize,
    access: Vec<usize>,
    capacity_bps: f64,
    rtt: Duration,
}

/// The shaped directions a path from `from` to `to` crosses, as indices into `dirs`.
fn dirs_on_path(t: &topo::Topology, dirs: &[LinkDir], from: usize, to: usize) -> Vec<usize> {
    let path = t.path(from, to).unwrap_or_default();
    let hops: Vec<(usize, usize)> = path.windows(2).map(|w| (w[0], w[1])).collect();
    (0..dirs.len())
        .filter(|&i| hops.contains(&(dirs[i].from, dirs[i].to)))
        .collect()
}

/// The one-way delays on the path between two nodes: the RTT, since each line delays one way.
fn path_rtt(t: &topo::Topology, from: usize, to: usize) -> Duration {
    let path = t.path(from, to).unwrap_or_default();
    t.links
        .iter()
        .filter(|l| {
            path.windows(2)
                .any(|w| (l.a, l.b) == (w[0], w[1]) || (l.b, l.a) == (w[0], w[1]))
        })
        .filter_map(|l| l.delay)
        .sum()
}

impl AccessPath {
    fn up() -> Result<AccessPath> {
        let tb = TopoTestbed::up(
            &topo::source(TOPOLOGY)?,
            TopoOptions {
                source: TOPOLOGY.into(),
                ..Default::default()
            },
        )?;
        let t = tb.topology();
        let (bg, rcv) = t
            .measure
            .ok_or_else(|| Error::Config(format!("{TOPOLOGY} names no [measure] pair")))?;
        let senders: Vec<usize> = t.flows.iter().map(|f| f.from).collect();
        let dirs = t.shaped_dirs();
        let shared = match dirs_on_path(t, &dirs, bg, rcv)[..] {
            [one] => one,
            _ => {
                return Err(Error::Config(format!(
                    "{TOPOLOGY}: expected one shaped link between the background host and rcv"
                )))
            }
        };
        let access: Vec<usize> = (0..dirs.len())
            .filter(|&i| senders.contains(&dirs[i].from))
            .collect();
        let capacity_bps = tb
            .capacity(dirs[shared])
            .map(|c| c.bps())
            .ok_or_else(|| Error::Config("the shared link has no capacity".into()))?;
        let rtt = path_rtt(t, bg, rcv);
        for &host in senders.iter().chain([&bg, &rcv]) {
            tcp_sysctls(&tb.ns(host), false)?;
        }
        Ok(AccessPath {
            senders,
            bg,
            rcv,
            shared,
            access,
            capacity_bps,
            rtt,
            tb,
        })
    }

    fn info(&self) -> PathInfo {
        let t = self.tb.topology();
        let dirs = t.shaped_dirs();
        let d = dirs[self.shared];
        let shaping = t.links[d.link].shaping.as_ref();
        PathInfo {
            testbed: format!("{TOPOLOGY} ({})", self.tb.name()),
            bottleneck: t.dir_label(d),
            configured_mbit: shaping.map_or(0.0, |s| mbit(s.capacity_bps as f64)),
            measured_mbit: mbit(self.capacity_bps),
            rtt_ms: self.rtt.as_secs_f64() * 1e3,
            buffer: shaping.map_or("-".into(), |s| buffer_text(s.buffer, s.capacity_bps)),
            loss: None,
            access_measured_mbit: self
                .access
                .iter()
                .filter_map(|&i| self.tb.capacity(dirs[i]).map(|c| mbit(c.bps())))
                .collect(),
        }
    }

    fn ctx(&self, scenario: Scenario) -> SetupCtx {
        let t = self.tb.topology();
        SetupCtx {
            cc: String::new(),
            scenario,
            sender_ns: self.tb.ns(self.bg),
            sender_addr: t.host_addr(self.bg),
            receiver_ns: self.tb.ns(self.rcv),
            receiver_addr: t.host_addr(self.rcv),
            rtt: self.rtt,
            capacity_bps: self.capacity_bps,
        }
    }

    fn bg_ends(&self) -> Endpoints {
        self.tb.endpoints(self.bg, self.rcv, BG_PORT)
    }

    /// Start `pattern(i)` from each foreground sender to rcv, for at most `max`.
    fn start_foreground(
        &self,
        pattern: impl Fn(usize) -> String,
        max: Duration,
    ) -> Result<Vec<CrossTraffic>> {
        let opts = GenOptions {
            max_duration: max,
            ..Default::default()
        };
        let mut out = Vec::new();
        for (i, &s) in self.senders.iter().enumerate() {
            let p = CrossPattern::parse(&pattern(i)).map_err(mgrp_testbed::Error::from)?;
            let ends = self.tb.endpoints(s, self.rcv, BASE_PORT + i as u16);
            out.push(CrossTraffic::start_between(&ends, &p, &opts)?);
        }
        Ok(out)
    }
}

/// Ground truth over [from, to] (CLOCK_MONOTONIC ns), or why there is none.
fn window(truth: &TopoTruth, from: u64, to: u64) -> Result<mgrp_testbed::topo::TopoBin> {
    truth
        .window(from, to)
        .ok_or_else(|| Error::Worker("no ground truth over the window".into()))
}

/// The background flow's rate on the shared link in [`BIN`]s from `from` to `to`.
fn bg_series(truth: &TopoTruth, shared: usize, from: u64, to: u64) -> Vec<f64> {
    let step = BIN.as_nanos() as u64;
    (0..)
        .map(|k| from + k * step)
        .take_while(|t| t + step <= to)
        .map(|t| {
            truth
                .window(t, t + step)
                .map_or(f64::NAN, |b| b.links[shared].fg_bps)
        })
        .collect()
}

/// What direction `i` drained while backlogged between `from` and `to` (bit/s): the truth's
/// drain over only that span's samples.
fn drain_between(truth: &TopoTruth, i: usize, from: u64, to: u64) -> Option<f64> {
    let span = TopoTruth {
        links: truth.links.clone(),
        origin_ns: truth.origin_ns,
        samples: truth
            .samples
            .iter()
            .filter(|s| (from..=to).contains(&s.t_ns))
            .cloned()
            .collect(),
    };
    span.drain(i).map(|d| d.bps)
}

/// Start-up left out of an average: at most `max_s`, at most a quarter of the phase.
fn settle(phase_s: f64, max_s: f64) -> u64 {
    secs_ns((phase_s / 4.0).min(max_s))
}

/// One background run's figures (rates in Mbit/s, on the shared link unless named).
#[derive(Debug, Clone, Serialize)]
pub struct BackgroundFigures {
    /// Foreground before the background flow joins.
    pub fg_before_mbit: f64,
    /// The same, summed over the senders' access links (a check on the shared link's counters).
    pub fg_access_before_mbit: f64,
    /// Foreground while the background flow runs.
    pub fg_during_mbit: f64,
    pub bg_mbit: f64,
    /// Measured capacity − foreground before.
    pub spare_mbit: f64,
    /// Background / spare.
    pub spare_share: Option<f64>,
    /// After the foreground stops: seconds until the background holds ≥ 90% of the measured
    /// capacity (over 0.5 s); `None` if not within the run.
    pub recovery_s: Option<f64>,
    /// Packets the shared link dropped while both ran.
    pub shared_drops: f64,
    /// What the shared link drained while backlogged as both ran: a second reading of its
    /// capacity (this VM's shaper drains a few per cent more when the CPUs are busy than when
    /// the flood measured it).
    pub shared_drain_mbit: Option<f64>,
    pub bg_tcp: TcpStats,
}

impl Brief for BackgroundFigures {
    fn brief(&self) -> String {
        format!(
            "foreground {:.1} → {:.1}, background {:.1} Mbit/s ({} of spare), recovery {}",
            self.fg_before_mbit,
            self.fg_during_mbit,
            self.bg_mbit,
            self.spare_share
                .map_or("-".into(), |s| format!("{:.0}%", s * 100.0)),
            self.recovery_s
                .map_or("none".into(), |s| format!("{s:.1} s"))
        )
    }
}

fn background_run(
    p: &AccessPath,
    cfg: &ModesConfig,
    cc: &str,
    hooks: Hooks,
) -> Result<BackgroundFigures> {
    let b = &cfg.background;
    let max = Duration::from_secs_f64(b.join_s + b.shared_s + b.recovery_s + 10.0);
    let sampler = TopoTruthSampler::start(&p.tb, BIN)?;
    let fg = p.start_foreground(|_| b.foreground.clone(), max)?;
    let t0 = fg.iter().map(|g| g.start_ns()).min().unwrap_or_else(now_ns);
    pause_until(hooks, t0 + secs_ns(b.join_s))?;
    let flow = BulkFlow::start(&p.bg_ends(), cc, max)?;
    let t_join = flow.start_ns();
    pause_until(hooks, t_join + secs_ns(b.shared_s))?;
    let t_stop = now_ns();
    for g in fg {
        g.stop()?;
    }
    pause_until(hooks, t_stop + secs_ns(b.recovery_s))?;
    let t_end = now_ns();
    let end = flow.stop()?;
    let truth = sampler.stop()?;

    let c = p.capacity_bps;
    let before = window(&truth, t0 + settle(b.join_s, 3.0), t_join)?;
    let during = window(&truth, t_join + settle(b.shared_s, 2.0), t_stop)?;
    let fg_before = before.links[p.shared].cross_bps;
    let bg = during.links[p.shared].fg_bps;
    let recovery = bg_series(&truth, p.shared, t_stop, t_end);
    Ok(BackgroundFigures {
        fg_before_mbit: mbit(fg_before),
        fg_access_before_mbit: mbit(p.access.iter().map(|&i| before.links[i].total_bps).sum()),
        fg_during_mbit: mbit(during.links[p.shared].cross_bps),
        bg_mbit: mbit(bg),
        spare_mbit: mbit(c - fg_before),
        spare_share: spare_share(bg, c, fg_before),
        recovery_s: first_sustained(&recovery, BIN.as_secs_f64(), 0.9 * c, HOLD_BINS),
        shared_drops: during.links[p.shared].drops,
        shared_drain_mbit: drain_between(
            &truth,
            p.shared,
            t_join + settle(b.shared_s, 2.0),
            t_stop,
        )
        .map(mbit),
        bg_tcp: end.tcp,
    })
}

/// A background scenario's row per CC: medians and ranges over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct BackgroundSummary {
    #[serde(flatten)]
    pub head: SummaryHead,
    pub fg_before_mbit: Option<Spread>,
    pub fg_during_mbit: Option<Spread>,
    pub bg_mbit: Option<Spread>,
    pub spare_share: Option<Spread>,
    /// Over the runs that recovered ([`Self::recovered`] of them).
    pub recovery_s: Option<Spread>,
    pub recovered: usize,
    pub bg_retrans: Option<Spread>,
    pub shared_drain_mbit: Option<Spread>,
}

fn background_summary(runs: &[Run<BackgroundFigures>]) -> Vec<BackgroundSummary> {
    ccs_of(runs)
        .iter()
        .map(|cc| {
            let mine: Vec<&Run<BackgroundFigures>> = runs.iter().filter(|r| &r.cc == cc).collect();
            let f = ok_figures(&mine);
            let s = |g: &dyn Fn(&BackgroundFigures) -> Option<f64>| {
                Spread::of(f.iter().filter_map(|x| g(x)))
            };
            BackgroundSummary {
                head: SummaryHead::of(cc, None, &mine),
                fg_before_mbit: s(&|x| Some(x.fg_before_mbit)),
                fg_during_mbit: s(&|x| Some(x.fg_during_mbit)),
                bg_mbit: s(&|x| Some(x.bg_mbit)),
                spare_share: s(&|x| x.spare_share),
                recovery_s: s(&|x| x.recovery_s),
                recovered: f.iter().filter(|x| x.recovery_s.is_some()).count(),
                bg_retrans: s(&|x| Some(x.bg_tcp.retrans as f64)),
                shared_drain_mbit: s(&|x| x.shared_drain_mbit),
            }
        })
        .collect()
}

/// Scenario 1: greedy foreground, a background flow per CC (seed 001 §5.5, Figs. 21–22).
pub fn background(
    cfg: &ModesConfig,
    setups: &Setups,
    hooks: Hooks,
) -> Result<ScenarioReport<BackgroundFigures, BackgroundSummary>> {
    hooks.say(&format!(
        "modes background: building {TOPOLOGY} (floods each shaped link)\n"
    ));
    let p = AccessPath::up()?;
    let ctx = p.ctx(Scenario::Background);
    let runs = each_cc(&cfg.background_ccs, cfg.repeat, setups, &ctx, hooks, |cc| {
        background_run(&p, cfg, cc, hooks)
    })?;
    Ok(ScenarioReport {
        paths: vec![p.info()],
        summary: background_summary(&runs),
        runs,
    })
}

/// One web run's figures: completion times of the flows that started and finished inside
/// each phase, rates on the shared link.
#[derive(Debug, Clone, Serialize)]
pub struct WebFigures {
    pub alone: Completion,
    pub with_bg: Completion,
    pub fg_alone_mbit: f64,
    pub fg_with_bg_mbit: f64,
    pub bg_mbit: f64,
    /// Web flows that did not complete (most are the ones cut when the run ends).
    pub flows_failed: u64,
    pub bg_tcp: TcpStats,
}

impl Brief for WebFigures {
    fn brief(&self) -> String {
        let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.0}"));
        format!(
            "web median {} → {} ms, p90 {} → {} ms, background {:.1} Mbit/s",
            ms(self.alone.median_ms),
            ms(self.with_bg.median_ms),
            ms(self.alone.p90_ms),
            ms(self.with_bg.p90_ms),
            self.bg_mbit
        )
    }
}

/// Completion times (s) of the flows of every report that began at or after `from` and
/// finished by `to` (CLOCK_MONOTONIC ns); each report with its generator's start.
fn completions(reports: &[(u64, GenReport)], from: u64, to: u64) -> Vec<f64> {
    reports
        .iter()
        .flat_map(|(start, r)| {
            r.flow_times.iter().filter_map(move |f| {
                let s = start + secs_ns(f.start_s);
                (s >= from && s + secs_ns(f.secs) <= to).then_some(f.secs)
            })
        })
        .collect()
}

/// The web pattern of sender `i`: its own seed unless the pattern sets one.
fn web_pattern(pattern: &str, i: usize) -> String {
    if pattern.contains("seed=") {
        pattern.to_string()
    } else {
        format!("{pattern},seed={}", i + 1)
    }
}

fn web_run(p: &AccessPath, cfg: &ModesConfig, cc: &str, hooks: Hooks) -> Result<WebFigures> {
    let phase = cfg.web.phase_s;
    let max = Duration::from_secs_f64(2.0 * phase + 10.0);
    let sampler = TopoTruthSampler::start(&p.tb, BIN)?;
    let gens = p.start_foreground(|i| web_pattern(&cfg.web.pattern, i), max)?;
    let t0 = gens
        .iter()
        .map(|g| g.start_ns())
        .min()
        .unwrap_or_else(now_ns);
    pause_until(hooks, t0 + secs_ns(phase))?;
    let flow = BulkFlow::start(&p.bg_ends(), cc, max)?;
    let t_join = flow.start_ns();
    pause_until(hooks, t_join + secs_ns(phase))?;
    let t_end = now_ns();
    let end = flow.stop()?;
    let mut reports = Vec::new();
    for g in gens {
        let start = g.start_ns();
        reports.push((start, g.stop()?));
    }
    let truth = sampler.stop()?;

    let settle = settle(phase, 2.0);
    let alone = window(&truth, t0 + settle, t_join)?;
    let with = window(&truth, t_join + settle, t_end)?;
    Ok(WebFigures {
        alone: Completion::of(&completions(&reports, t0 + settle, t_join)),
        with_bg: Completion::of(&completions(&reports, t_join + settle, t_end)),
        fg_alone_mbit: mbit(alone.links[p.shared].cross_bps),
        fg_with_bg_mbit: mbit(with.links[p.shared].cross_bps),
        bg_mbit: mbit(with.links[p.shared].fg_bps),
        flows_failed: reports.iter().map(|(_, r)| r.flows_failed).sum(),
        bg_tcp: end.tcp,
    })
}

/// A web scenario's row per CC.
#[derive(Debug, Clone, Serialize)]
pub struct WebSummary {
    #[serde(flatten)]
    pub head: SummaryHead,
    pub alone_median_ms: Option<Spread>,
    pub with_bg_median_ms: Option<Spread>,
    pub alone_p90_ms: Option<Spread>,
    pub with_bg_p90_ms: Option<Spread>,
    pub bg_mbit: Option<Spread>,
    /// Median background rate over Reno's (when Reno ran).
    pub bg_vs_reno: Option<f64>,
}

fn web_summary(runs: &[Run<WebFigures>]) -> Vec<WebSummary> {
    let mut out: Vec<WebSummary> = ccs_of(runs)
        .iter()
        .map(|cc| {
            let mine: Vec<&Run<WebFigures>> = runs.iter().filter(|r| &r.cc == cc).collect();
            let f = ok_figures(&mine);
            let s =
                |g: &dyn Fn(&WebFigures) -> Option<f64>| Spread::of(f.iter().filter_map(|x| g(x)));
            WebSummary {
                head: SummaryHead::of(cc, None, &mine),
                alone_median_ms: s(&|x| x.alone.median_ms),
                with_bg_median_ms: s(&|x| x.with_bg.median_ms),
                alone_p90_ms: s(&|x| x.alone.p90_ms),
                with_bg_p90_ms: s(&|x| x.with_bg.p90_ms),
                bg_mbit: s(&|x| Some(x.bg_mbit)),
                bg_vs_reno: None,
            }
        })
        .collect();
    let reno = out
        .iter()
        .find(|s| s.head.cc == "reno")
        .and_then(|s| s.bg_mbit.map(|b| b.median));
    for s in &mut out {
        s.bg_vs_reno = ratio(s.bg_mbit.map(|b| b.median), reno);
    }
    out
}

/// Scenario 2: web-like foreground, completion times without and with a background flow.
pub fn web(
    cfg: &ModesConfig,
    setups: &Setups,
    hooks: Hooks,
) -> Result<ScenarioReport<WebFigures, WebSummary>> {
    hooks.say(&format!(
        "modes web: building {TOPOLOGY} (floods each shaped link)\n"
    ));
    let p = AccessPath::up()?;
    let ctx = p.ctx(Scenario::Web);
    let runs = each_cc(&cfg.background_ccs, cfg.repeat, setups, &ctx, hooks, |cc| {
        web_run(&p, cfg, cc, hooks)
    })?;
    Ok(ScenarioReport {
        paths: vec![p.info()],
        summary: web_summary(&runs),
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_testbed::generator::WebFlowTime;

    #[test]
    fn the_topology_has_one_shared_link_and_40ms() {
        let t = topo::load(TOPOLOGY).unwrap();
        let (bg, rcv) = t.measure.unwrap();
        let dirs = t.shaped_dirs();
        let shared = dirs_on_path(&t, &dirs, bg, rcv);
        assert_eq!(shared.len(), 1);
        assert_eq!(t.dir_label(dirs[shared[0]]), "agg→gw");
        assert_eq!(path_rtt(&t, bg, rcv), Duration::from_millis(40));
        // Each foreground sender crosses its own access link and the shared one, and sees the
        // same RTT as the background flow.
        for f in &t.flows {
            let on = dirs_on_path(&t, &dirs, f.from, f.to);
            assert_eq!(on.len(), 2, "{on:?}");
            assert!(on.contains(&shared[0]));
            assert_eq!(path_rtt(&t, f.from, f.to), Duration::from_millis(40));
        }
        assert_eq!(t.flows.len(), 4);
    }

    #[test]
    fn completions_keep_flows_inside_the_phase() {
        let r = GenReport {
            flow_times: vec![
                WebFlowTime {
                    start_s: 0.5,
                    bytes: 1,
                    secs: 0.1,
                },
                WebFlowTime {
                    start_s: 1.5,
                    bytes: 1,
                    secs: 0.2,
                },
                WebFlowTime {
                    start_s: 2.9,
                    bytes: 1,
                    secs: 0.3,
                },
            ],
            ..Default::default()
        };
        let start = 10_000_000_000;
        let reports = vec![(start, r)];
        let s = |x: f64| start + secs_ns(x);
        // [1 s, 3 s]: the flow from 0.5 s began too early, the one from 2.9 s ended too late.
        assert_eq!(completions(&reports, s(1.0), s(3.0)), vec![0.2]);
        assert_eq!(completions(&reports, s(0.0), s(4.0)).len(), 3);
    }

    #[test]
    fn web_patterns_get_their_own_seed() {
        assert_eq!(web_pattern("web:5mbit", 0), "web:5mbit,seed=1");
        assert_eq!(web_pattern("web:5mbit,seed=7", 3), "web:5mbit,seed=7");
    }
}

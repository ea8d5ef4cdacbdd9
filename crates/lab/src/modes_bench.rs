//! `mgrp bench modes`: congestion controls as transfer modes, measured against the testbed's
//! ground truth (issue 17's benchmark; seed 001 §5.5–5.7).
//!
//! Four scenarios, each a function with a `--quick` variant:
//! - **background** ([`background`]): four greedy CUBIC senders behind their own 10 Mbit/s access
//!   links share a 50 Mbit/s link (RTT 40 ms, topology `access_bg`); a bulk flow on the CC under
//!   test joins later, and runs on after the foreground stops. Foreground before/after, the
//!   background's rate and its share of the spare capacity, and how fast it takes the link back.
//! - **web**: the same path with web-like foreground flows: completion times with and without
//!   the background flow, and the background's rate.
//! - **high-bdp** ([`full_speed`]): one 100 Mbit/s path, RTT 200 ms, a queue of one BDP: time to
//!   90% utilisation and retransmissions.
//! - **lossy**: a 2 Mbit/s path with random loss: goodput, and its ratio to Reno's.
//!
//! A congestion control is a name (`TCP_CONGESTION`) and, for one the kernel does not have built
//! in, a [`Setup`] hook that makes it available (loads a BPF program, starts feeding a map) for
//! as long as the guard it returns lives. A CC that is not available when its run starts gives
//! a row that says so, and the bench goes on.

mod background;
mod flow;
mod full_speed;
pub mod metrics;
pub mod setups;

pub use flow::{tcp_sysctls, BulkFlow, TcpStats};
pub use metrics::{Completion, Spread};

use crate::{ensure, Error, Hooks, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// What a setup hook keeps alive while the runs of its congestion control go on.
pub type Guard = Box<dyn std::any::Any>;

/// Called once per path before the runs of a CC that is not built into the kernel (e.g. loads
/// the eBPF program and keeps it registered while the guard lives; for `mgrp_bg` also starts
/// feeding the path's estimate into its map). Kernel CCs have none.
pub type Setup = Box<dyn Fn(&SetupCtx) -> Result<Guard, String>>;

/// Setup hooks by congestion-control name.
pub type Setups = BTreeMap<String, Setup>;

/// What a setup hook is told about the path the CC is about to run on.
#[derive(Debug, Clone, Serialize)]
pub struct SetupCtx {
    pub cc: String,
    pub scenario: Scenario,
    /// Network namespace and address of the flow's sender (the background host, or `snd`).
    pub sender_ns: String,
    pub sender_addr: Ipv4Addr,
    /// ... and of its receiver.
    pub receiver_ns: String,
    pub receiver_addr: Ipv4Addr,
    /// The path's base RTT: what its delay lines add.
    #[serde(serialize_with = "as_secs")]
    pub rtt: Duration,
    /// The measured capacity of the bottleneck the flow crosses, bit/s.
    pub capacity_bps: f64,
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    Background,
    Web,
    HighBdp,
    Lossy,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::Background,
        Scenario::Web,
        Scenario::HighBdp,
        Scenario::Lossy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Background => "background",
            Scenario::Web => "web",
            Scenario::HighBdp => "high-bdp",
            Scenario::Lossy => "lossy",
        }
    }

    pub fn parse(s: &str) -> Result<Scenario> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown scenario {s:?}: use background, web, high-bdp, lossy"
                ))
            })
    }
}

/// Compared as the background flow unless told otherwise.
pub const DEFAULT_BACKGROUND_CCS: [&str; 5] = ["reno", "cubic", "bbr", "mgrp_ledbat", "mgrp_bg"];
/// Compared as the full-speed flow unless told otherwise.
pub const DEFAULT_FULL_SPEED_CCS: [&str; 4] = ["reno", "cubic", "bbr", "mgrp_fs"];

/// The background and web scenarios' timing (the path is the `access_bg` topology).
#[derive(Debug, Clone, Serialize)]
pub struct BackgroundParams {
    /// Seconds the foreground runs alone before the background flow joins (the seed's 30).
    pub join_s: f64,
    /// Seconds the background flow shares the link with the foreground.
    pub shared_s: f64,
    /// Seconds the background flow runs on after the foreground stops (recovery is looked for
    /// in them).
    pub recovery_s: f64,
    /// Each foreground sender's traffic (a testbed pattern).
    pub foreground: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct WebParams {
    /// Seconds without the background flow, then as many with it.
    pub phase_s: f64,
    /// Each of the four senders' web pattern (its seed is the sender's number).
    pub pattern: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct HighBdpParams {
    pub capacity_mbit: f64,
    pub rtt_ms: f64,
    /// Bottleneck queue in bandwidth-delay products.
    pub buffer_bdp: f64,
    pub secs: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LossyParams {
    pub capacity_mbit: f64,
    pub rtt_ms: f64,
    /// Random loss rates on the flow's path, per cent.
    pub losses_pct: Vec<f64>,
    pub secs: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModesConfig {
    pub scenarios: Vec<Scenario>,
    /// Compared in the background and web scenarios.
    pub background_ccs: Vec<String>,
    /// Compared in the high-bdp and lossy scenarios.
    pub full_speed_ccs: Vec<String>,
    /// Runs per congestion control (and loss rate).
    pub repeat: u32,
    pub background: BackgroundParams,
    pub web: WebParams,
    pub high_bdp: HighBdpParams,
    pub lossy: LossyParams,
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl ModesConfig {
    /// The default bench: the seed's 30 s before the background flow joins, short phases
    /// elsewhere (≈ 8 min with the kernel's three CCs).
    pub fn standard() -> ModesConfig {
        ModesConfig {
            scenarios: Scenario::ALL.to_vec(),
            background_ccs: names(&DEFAULT_BACKGROUND_CCS),
            full_speed_ccs: names(&DEFAULT_FULL_SPEED_CCS),
            repeat: 1,
            background: BackgroundParams {
                join_s: 30.0,
                shared_s: 15.0,
                recovery_s: 8.0,
                foreground: "tcp:1,cc=cubic".into(),
            },
            web: WebParams {
                phase_s: 12.0,
                pattern: "web:5mbit".into(),
            },
            high_bdp: HighBdpParams {
                capacity_mbit: 100.0,
                rtt_ms: 200.0,
                buffer_bdp: 1.0,
                secs: 15.0,
            },
            lossy: LossyParams {
                capacity_mbit: 2.0,
                rtt_ms: 100.0,
                losses_pct: vec![0.1, 1.0, 3.0, 5.0],
                secs: 10.0,
            },
        }
    }

    /// Every scenario, small: for a look and for tests.
    pub fn quick() -> ModesConfig {
        let mut c = ModesConfig::standard();
        // 8 s before the join: averages over 6 s, so that a half-second stall of the host
        // (another job on both CPUs) moves the foreground figure by less than 10%.
        c.background.join_s = 8.0;
        c.background.shared_s = 8.0;
        c.background.recovery_s = 5.0;
        c.web.phase_s = 6.0;
        c.high_bdp.secs = 8.0;
        c.lossy.losses_pct = vec![1.0, 5.0];
        c.lossy.secs = 6.0;
        c
    }

    pub fn check(&self) -> Result<()> {
        let b = &self.background;
        ensure(!self.scenarios.is_empty(), "no scenario to run")?;
        ensure((1..=50).contains(&self.repeat), "--repeat must be 1..=50")?;
        for cc in self.background_ccs.iter().chain(&self.full_speed_ccs) {
            check_cc_name(cc)?;
        }
        ensure(
            !self.background_ccs.is_empty() && !self.full_speed_ccs.is_empty(),
            "no congestion control to compare",
        )?;
        ensure(
            (1.0..=600.0).contains(&b.join_s)
                && (2.0..=600.0).contains(&b.shared_s)
                && (1.0..=120.0).contains(&b.recovery_s),
            "background: join 1..=600 s, shared 2..=600 s, recovery 1..=120 s",
        )?;
        mgrp_testbed::CrossPattern::parse(&b.foreground).map_err(mgrp_testbed::Error::from)?;
        ensure(
            (2.0..=600.0).contains(&self.web.phase_s),
            "web: phase 2..=600 s",
        )?;
        let web = mgrp_testbed::CrossPattern::parse(&self.web.pattern)
            .map_err(mgrp_testbed::Error::from)?;
        ensure(
            matches!(web, mgrp_testbed::CrossPattern::Web { .. }),
            "web: the pattern must be web:RATE[,...]",
        )?;
        let h = &self.high_bdp;
        ensure(
            (1.0..=1000.0).contains(&h.capacity_mbit)
                && (1.0..=1000.0).contains(&h.rtt_ms)
                && (0.1..=10.0).contains(&h.buffer_bdp)
                && (2.0..=600.0).contains(&h.secs),
            "high-bdp: capacity 1..=1000 Mbit/s, RTT 1..=1000 ms, buffer 0.1..=10 BDP, 2..=600 s",
        )?;
        let l = &self.lossy;
        ensure(
            (0.1..=1000.0).contains(&l.capacity_mbit)
                && (1.0..=1000.0).contains(&l.rtt_ms)
                && (2.0..=600.0).contains(&l.secs)
                && !l.losses_pct.is_empty()
                && l.losses_pct.iter().all(|p| (0.0..=50.0).contains(p)),
            "lossy: capacity 0.1..=1000 Mbit/s, RTT 1..=1000 ms, 2..=600 s, losses 0..=50%",
        )
    }
}

/// Kernel congestion-control names: 1–15 characters of a-z, 0-9 and `_`.
fn check_cc_name(cc: &str) -> Result<()> {
    let ok = (1..=15).contains(&cc.len())
        && cc
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    ensure(
        ok,
        &format!("{cc:?} is not a congestion-control name (1-15 of a-z, 0-9, _)"),
    )
}

/// Whether a run produced figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    #[serde(rename = "ok")]
    Ok,
    /// The CC was not offered in the sender's namespace (or its setup hook failed).
    #[serde(rename = "not available")]
    NotAvailable,
    /// Something else went wrong in this run; the bench went on.
    #[serde(rename = "failed")]
    Failed,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::NotAvailable => "not available",
            Status::Failed => "failed",
        })
    }
}

/// A queue limit for people: `100 packets`, `50 ms`, `64000 B`.
fn buffer_text(b: mgrp_testbed::Buffer, capacity_bps: u64) -> String {
    match b {
        mgrp_testbed::Buffer::Packets(n) => format!("{n} packets"),
        mgrp_testbed::Buffer::Bytes(n) => format!("{n} B"),
        mgrp_testbed::Buffer::Time(d) => {
            format!("{} ms = {} B", d.as_secs_f64() * 1e3, b.bytes(capacity_bps))
        }
    }
}

/// One run of one CC.
#[derive(Debug, Clone, Serialize)]
pub struct Run<F> {
    pub cc: String,
    /// 1-based repetition.
    pub rep: u32,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub figures: Option<F>,
}

/// The path a scenario ran on, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct PathInfo {
    pub testbed: String,
    /// The bottleneck the flow under test crosses.
    pub bottleneck: String,
    pub configured_mbit: f64,
    pub measured_mbit: f64,
    pub rtt_ms: f64,
    pub buffer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<String>,
    /// Measured capacity of each foreground access link (background and web).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub access_measured_mbit: Vec<f64>,
}

/// The columns every summary row starts with.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryHead {
    pub cc: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub runs: usize,
    pub runs_ok: usize,
}

impl SummaryHead {
    /// Over the runs of one CC: ok if any run was, else the first run's status and reason.
    fn of<F>(cc: &str, loss_pct: Option<f64>, runs: &[&Run<F>]) -> SummaryHead {
        let ok = runs.iter().filter(|r| r.status == Status::Ok).count();
        let first = runs.first();
        SummaryHead {
            cc: cc.to_string(),
            loss_pct,
            status: if ok > 0 {
                Status::Ok
            } else {
                first.map_or(Status::Failed, |r| r.status)
            },
            reason: if ok > 0 {
                None
            } else {
                first.and_then(|r| r.reason.clone())
            },
            runs: runs.len(),
            runs_ok: ok,
        }
    }
}

/// Runs, their summary per CC, and the paths they ran on.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport<F, S> {
    pub paths: Vec<PathInfo>,
    pub runs: Vec<Run<F>>,
    pub summary: Vec<S>,
}

pub use background::{BackgroundFigures, BackgroundSummary, WebFigures, WebSummary};
pub use full_speed::{HighBdpFigures, HighBdpSummary, LossyFigures, LossySummary};

#[derive(Debug, Clone, Serialize)]
pub struct ModesReport {
    pub bench: &'static str,
    pub config: ModesConfig,
    pub background: Option<ScenarioReport<BackgroundFigures, BackgroundSummary>>,
    pub web: Option<ScenarioReport<WebFigures, WebSummary>>,
    pub high_bdp: Option<ScenarioReport<HighBdpFigures, HighBdpSummary>>,
    pub lossy: Option<ScenarioReport<LossyFigures, LossySummary>>,
}

/// Run the scenarios of `cfg`, with `setups` for the CCs the kernel does not have built in.
pub fn run(cfg: &ModesConfig, setups: &Setups, hooks: Hooks) -> Result<ModesReport> {
    cfg.check()?;
    let mut report = ModesReport {
        bench: "modes",
        config: cfg.clone(),
        background: None,
        web: None,
        high_bdp: None,
        lossy: None,
    };
    let on = |s| cfg.scenarios.contains(&s);
    if on(Scenario::Background) {
        report.background = Some(background::background(cfg, setups, hooks)?);
    }
    if on(Scenario::Web) {
        report.web = Some(background::web(cfg, setups, hooks)?);
    }
    if on(Scenario::HighBdp) {
        report.high_bdp = Some(full_speed::high_bdp(cfg, setups, hooks)?);
    }
    if on(Scenario::Lossy) {
        report.lossy = Some(full_speed::lossy(cfg, setups, hooks)?);
    }
    Ok(report)
}

/// A run's figures in a few words, for the progress line.
trait Brief {
    fn brief(&self) -> String;
}

/// Sleep for `d` in slices, ending early with [`Error::Interrupted`] when told to stop.
fn pause(hooks: Hooks, d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        if hooks.stopped() {
            return Err(Error::Interrupted);
        }
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
}

/// Sleep until CLOCK_MONOTONIC `t_ns` (see [`pause`]).
fn pause_until(hooks: Hooks, t_ns: u64) -> Result<()> {
    let now = mgrp_testbed::clock::now_ns();
    pause(hooks, Duration::from_nanos(t_ns.saturating_sub(now)))
}

fn secs_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

/// Between runs: queues drain, sockets close.
const SETTLE: Duration = Duration::from_secs(1);

/// Run every CC of `ccs` `repeat` times on one path. Each CC's setup hook (if any) runs once
/// first and its guard is held over its runs; each run first checks that the CC is offered in
/// the sender's namespace. A CC that is not, or whose hook fails, gets rows that say why.
fn each_cc<F: Brief>(
    ccs: &[String],
    repeat: u32,
    setups: &Setups,
    ctx: &SetupCtx,
    hooks: Hooks,
    mut run: impl FnMut(&str) -> Result<F>,
) -> Result<Vec<Run<F>>> {
    let mut rows = Vec::new();
    for cc in ccs {
        let ctx = SetupCtx {
            cc: cc.clone(),
            ..ctx.clone()
        };
        let hook = setups.get(cc);
        let guard = match hook.map(|f| f(&ctx)).transpose() {
            Ok(g) => g,
            Err(why) => {
                for rep in 1..=repeat {
                    let row = miss(
                        cc,
                        rep,
                        Status::NotAvailable,
                        format!("setup failed: {why}"),
                    );
                    say_row(hooks, ctx.scenario, repeat, &row);
                    rows.push(row);
                }
                continue;
            }
        };
        for rep in 1..=repeat {
            let got = flow::check_available(&ctx.sender_ns, cc).and_then(|_| run(cc));
            let row = match got {
                Ok(f) => Run {
                    cc: cc.clone(),
                    rep,
                    status: Status::Ok,
                    reason: None,
                    figures: Some(f),
                },
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(Error::Unavailable(why)) => {
                    let why = match hook {
                        Some(_) => why,
                        None => format!("{why}; no setup hook loads it"),
                    };
                    miss(cc, rep, Status::NotAvailable, why)
                }
                Err(e) => miss(cc, rep, Status::Failed, e.to_string()),
            };
            say_row(hooks, ctx.scenario, repeat, &row);
            let ran = row.status != Status::NotAvailable;
            rows.push(row);
            if ran {
                pause(hooks, SETTLE)?;
            }
        }
        drop(guard);
    }
    Ok(rows)
}

fn miss<F>(cc: &str, rep: u32, status: Status, reason: String) -> Run<F> {
    Run {
        cc: cc.to_string(),
        rep,
        status,
        reason: Some(reason),
        figures: None,
    }
}

fn say_row<F: Brief>(hooks: Hooks, scenario: Scenario, repeat: u32, row: &Run<F>) {
    let what = match (&row.figures, &row.reason) {
        (Some(f), _) => f.brief(),
        (None, Some(r)) => format!("{}: {r}", row.status),
        (None, None) => row.status.to_string(),
    };
    hooks.say(&format!(
        "modes {} {} run {}/{repeat}: {what}\n",
        scenario.name(),
        row.cc,
        row.rep
    ));
}

/// The distinct CCs of `runs`, in their order.
fn ccs_of<F>(runs: &[Run<F>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in runs {
        if !out.contains(&r.cc) {
            out.push(r.cc.clone());
        }
    }
    out
}

/// The figures of the OK runs among `runs`.
fn ok_figures<'a, F>(runs: &[&'a Run<F>]) -> Vec<&'a F> {
    runs.iter().filter_map(|r| r.figures.as_ref()).collect()
}

fn mbit(bps: f64) -> f64 {
    bps / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_check() {
        ModesConfig::standard().check().unwrap();
        ModesConfig::quick().check().unwrap();
        let bad = |f: &dyn Fn(&mut ModesConfig), want: &str| {
            let mut c = ModesConfig::quick();
            f(&mut c);
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(want), "wanted {want:?} in {e}");
        };
        bad(&|c| c.repeat = 0, "--repeat");
        bad(
            &|c| c.background_ccs = vec!["Cubic!".into()],
            "not a congestion",
        );
        bad(
            &|c| c.full_speed_ccs = vec!["a".repeat(16)],
            "not a congestion",
        );
        bad(&|c| c.full_speed_ccs.clear(), "no congestion control");
        bad(&|c| c.lossy.losses_pct = vec![60.0], "losses");
        bad(&|c| c.web.pattern = "cbr:1mbit".into(), "web:RATE");
        bad(
            &|c| c.background.foreground = "warp:9".into(),
            "bad cross pattern",
        );
        bad(&|c| c.high_bdp.rtt_ms = 0.0, "high-bdp");
        bad(&|c| c.scenarios.clear(), "no scenario");
        assert_eq!(Scenario::parse("high-bdp").unwrap(), Scenario::HighBdp);
        assert!(Scenario::parse("fast").is_err());
    }

    #[test]
    fn summary_head_says_why_when_nothing_ran() {
        let na: Run<()> = miss("mgrp_bg", 1, Status::NotAvailable, "not there".into());
        let h = SummaryHead::of("mgrp_bg", None, &[&na]);
        assert_eq!(h.status, Status::NotAvailable);
        assert_eq!(h.reason.as_deref(), Some("not there"));
        let ok = Run {
            figures: Some(()),
            status: Status::Ok,
            reason: None,
            ..na.clone()
        };
        let h = SummaryHead::of("mgrp_bg", None, &[&na, &ok]);
        assert_eq!((h.status, h.runs, h.runs_ok), (Status::Ok, 2, 1));
        assert!(h.reason.is_none());
    }

    #[test]
    fn rows_serialise_flat_with_the_status_in_words() {
        #[derive(Serialize, Clone)]
        struct F {
            x: f64,
        }
        let r = Run {
            cc: "reno".into(),
            rep: 1,
            status: Status::Ok,
            reason: None,
            figures: Some(F { x: 1.5 }),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["status"], "ok");
        assert_eq!(v["x"], 1.5);
        let m: Run<F> = miss("mgrp_fs", 2, Status::NotAvailable, "why".into());
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["status"], "not available");
        assert_eq!(v["reason"], "why");
        assert!(v.get("x").is_none());
    }
}

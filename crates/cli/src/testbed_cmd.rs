//! `mgrp testbed ...`

use crate::say;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use mgrp_estimate::methods::Method;
use mgrp_lab::testbed_run::{Event, RunConfig};
use mgrp_testbed::delayline::DelayStats;
use mgrp_testbed::generator::GenReport;
use mgrp_testbed::rtt::measure_rtt;
use mgrp_testbed::topology::{self, existing_namespaces, list_testbeds, State};
use mgrp_testbed::units::{fmt_rate, parse_bytes, parse_duration, parse_rate};
use mgrp_testbed::{
    Buffer, CrossPattern, DelayDir, DelayImpl, DelayMode, LinkCapacity, LossModel, Role, Shaper,
    Testbed, TestbedConfig,
};
use std::time::Duration;

#[derive(Subcommand)]
pub enum TestbedCmd {
    /// Build a testbed that stays up until `mgrp testbed down`.
    Up(UpArgs),
    /// Tear testbeds down: namespaces, links, qdiscs, the delay line process, state.
    Down(DownArgs),
    /// List testbeds, or show one with its bottleneck counters.
    Status(StatusArgs),
    /// Build a testbed, run cross traffic, print ground truth, tear down.
    Run(RunArgs),
    /// (internal) The delay line process of a testbed made by `up`.
    #[command(hide = true)]
    Delayline(DelaylineArgs),
}

#[derive(Args, Clone)]
pub struct PathArgs {
    /// Bottleneck capacity (tc units: 20mbit, 500kbit, 1gbit).
    #[arg(long, default_value = "20mbit", value_parser = rate)]
    capacity: u64,
    /// Bottleneck buffer: packets (100p), time at capacity (50ms) or bytes (64kb).
    #[arg(long, default_value = "100p", value_parser = buffer)]
    buffer: Buffer,
    /// Shaper burst in bytes [default: max(100 B, 60 µs × capacity); + one frame for tbf].
    #[arg(long, value_parser = bytes)]
    burst: Option<u64>,
    /// Shaping discipline on the bottleneck.
    #[arg(long, value_enum, default_value_t = ShaperArg::Htb)]
    shaper: ShaperArg,
    /// Extra one-way delay from the testbed's delay line (e.g. 20ms).
    #[arg(long, value_parser = duration)]
    delay: Option<Duration>,
    /// Which direction the delay line delays.
    #[arg(long, value_enum, default_value_t = DelayDirArg::Reverse)]
    delay_dir: DelayDirArg,
    /// What makes the delay: netem where the kernel has it (auto), or the project's TUN line.
    #[arg(long, value_enum, default_value_t = DelayImplArg::Auto)]
    delay_impl: DelayImplArg,
    /// Trust the configured capacity instead of measuring what the shaper drains (saves the
    /// half-second flood at start; the truth is then off by the shaper's shortfall).
    #[arg(long)]
    no_measure_capacity: bool,
    /// Packet loss on the measured flow (snd → rcv), before the bottleneck: 1%, random:1%, or
    /// Gilbert–Elliott ge:p=0.5%,r=20%[,bad=100%,good=0%] (p: good→bad, r: bad→good).
    #[arg(long, value_parser = loss)]
    loss: Option<LossModel>,
    /// Seed of the loss model: same seed, same packets lost.
    #[arg(long, default_value_t = 1)]
    loss_seed: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum DelayImplArg {
    Auto,
    Netem,
    Tun,
}

#[derive(Clone, Copy, ValueEnum)]
enum ShaperArg {
    Htb,
    Tbf,
}

#[derive(Clone, Copy, ValueEnum)]
enum DelayDirArg {
    Reverse,
    Forward,
    Both,
}

impl PathArgs {
    fn config(&self, name: Option<String>) -> TestbedConfig {
        TestbedConfig {
            name,
            capacity_bps: self.capacity,
            buffer: self.buffer,
            burst_bytes: self.burst,
            shaper: match self.shaper {
                ShaperArg::Htb => Shaper::Htb,
                ShaperArg::Tbf => Shaper::Tbf,
            },
            delay: self.delay.filter(|d| !d.is_zero()),
            delay_dir: match self.delay_dir {
                DelayDirArg::Reverse => DelayDir::Reverse,
                DelayDirArg::Forward => DelayDir::Forward,
                DelayDirArg::Both => DelayDir::Both,
            },
            delay_impl: match self.delay_impl {
                DelayImplArg::Auto => DelayImpl::Auto,
                DelayImplArg::Netem => DelayImpl::Netem,
                DelayImplArg::Tun => DelayImpl::Tun,
            },
            measure_capacity: !self.no_measure_capacity,
            loss: self.loss.clone(),
            loss_seed: self.loss_seed,
        }
    }
}

#[derive(Args)]
pub struct UpArgs {
    /// Instance name (namespaces are mgrp-NAME-ROLE).
    #[arg(long, default_value = "tb")]
    name: String,
    #[command(flatten)]
    path: PathArgs,
    /// Build this topology file, or a built-in one by name (chain3, tree, access, access_bg), instead.
    #[arg(long, value_name = "FILE|NAME")]
    topology: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DownArgs {
    /// Testbeds to remove.
    names: Vec<String>,
    /// Remove every testbed on this machine, including other users' running ones.
    #[arg(long, conflicts_with = "names")]
    all: bool,
    /// Remove testbeds whose owning process has died (crashed runs and tests).
    #[arg(long, conflicts_with = "names")]
    stale: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Show this testbed in detail.
    name: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    path: PathArgs,
    /// Build this topology file (or built-in chain3, tree, access, access_bg) and run its flows instead.
    #[arg(long, value_name = "FILE|NAME", conflicts_with_all = ["on", "estimate", "dashboard"])]
    topology: Option<String>,
    /// Cross traffic, repeatable: cbr:RATE, poisson:RATE, onoff:RATE[,on=,off=,dist=exp],
    /// step:R1,R2,..[,every=T], peaks:R1@T1,R2@T2,.., tcp:FLOWS[,cc=bbr],
    /// web:RATE[,mean=12kb,shape=1.2,max_flows=64]; UDP kinds take size=, random ones seed=.
    /// `none` for idle.
    #[arg(long, default_value = "step:2,6,10,12,8,4mbit,every=2s", value_parser = pattern)]
    cross: Vec<Option<CrossPattern>>,
    /// How long to run the cross traffic.
    #[arg(long, default_value = "12s", value_parser = duration)]
    duration: Duration,
    /// Ground-truth bin width in the JSON series.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    bin: Duration,
    /// Row width of the live table.
    #[arg(long, default_value = "1s", value_parser = duration)]
    report_every: Duration,
    /// Spin before each UDP departure this long instead of sleeping (timer lateness absorber).
    #[arg(long, default_value = "50us", value_parser = duration)]
    spin: Duration,
    /// Pings across the path to report RTT (0 = skip).
    #[arg(long, default_value_t = 20)]
    pings: u32,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document to this file.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Also run agents at both ends and estimate (capacity once, then available bandwidth again
    /// and again, with `auto` unless a method is named), printing each estimate beside the
    /// ground truth of its window.
    #[arg(long, num_args = 0..=1, default_missing_value = "auto", value_name = "METHOD",
          value_parser = crate::methods::parser())]
    estimate: Option<Method>,
    /// Run on this existing testbed (from `testbed up`) instead of building one; path options
    /// are then ignored and the testbed stays up.
    #[arg(long)]
    on: Option<String>,
    /// Run the estimation service on the path (method `auto`, or --estimate's, every second),
    /// its ground truth beside it, and serve the dashboard and HTTP API here.
    #[arg(long, num_args = 0..=1, default_missing_value = "127.0.0.1:7241", value_name = "IP:PORT",
          conflicts_with = "estimate")]
    dashboard: Option<std::net::SocketAddr>,
    /// With --dashboard: the method the service measures with.
    #[arg(long, default_value = "auto", requires = "dashboard", value_parser = crate::methods::parser())]
    dashboard_method: Method,
    /// Track the path instead, as the service does (short checks; the probe load over any
    /// trailing minute at most 2% of C), printing each estimate beside the truth and the load
    /// of the minute before it as the bottleneck counted it.
    #[arg(long, conflicts_with_all = ["estimate", "dashboard"])]
    track: bool,
}

#[derive(Args)]
pub struct DelaylineArgs {
    #[arg(long, required = true)]
    ns: Vec<String>,
    #[arg(long)]
    delay_ns: u64,
    #[arg(long)]
    stats: std::path::PathBuf,
    /// TUN device name.
    #[arg(long, default_value = topology::DELAY_DEV)]
    dev: String,
    /// Loss model applied before the delay.
    #[arg(long, value_parser = loss)]
    loss: Option<LossModel>,
    #[arg(long, default_value_t = 1)]
    loss_seed: u64,
}

pub fn rate(s: &str) -> Result<u64, String> {
    parse_rate(s).map_err(|e| e.to_string())
}
pub fn bytes(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|e| e.to_string())
}
pub fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}
fn buffer(s: &str) -> Result<Buffer, String> {
    Buffer::parse(s).map_err(|e| e.to_string())
}
fn loss(s: &str) -> Result<LossModel, String> {
    LossModel::parse(s).map_err(|e| e.to_string())
}
fn pattern(s: &str) -> Result<Option<CrossPattern>, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    CrossPattern::parse(s).map(Some).map_err(|e| e.to_string())
}

pub fn run(cmd: TestbedCmd) -> Result<()> {
    match cmd {
        TestbedCmd::Up(a) => up(a),
        TestbedCmd::Down(a) => down(a),
        TestbedCmd::Status(a) => status(a),
        TestbedCmd::Run(a) => run_job(a),
        TestbedCmd::Delayline(a) => delayline(a),
    }
}

fn delay_mode_process() -> Result<DelayMode> {
    let exe =
        std::env::current_exe().context("cannot find the mgrp executable to run the delay line")?;
    Ok(DelayMode::Process {
        program: exe,
        args: vec!["testbed".into(), "delayline".into()],
    })
}

fn describe(tb: &Testbed) -> String {
    let c = tb.config();
    let shaper = match c.shaper {
        Shaper::Htb => "htb",
        Shaper::Tbf => "tbf",
    };
    let buf = match c.buffer {
        Buffer::Packets(n) => format!("{n} packets"),
        Buffer::Bytes(b) => format!("{b} B"),
        Buffer::Time(d) => format!(
            "{} ms = {} B",
            d.as_secs_f64() * 1e3,
            c.buffer.bytes(c.capacity_bps)
        ),
    };
    let delay = match c.delay {
        Some(d) => format!(
            "{} ms one-way, {:?} path",
            d.as_secs_f64() * 1e3,
            c.delay_dir
        )
        .to_lowercase(),
        None => "none".into(),
    };
    let text = format!(
        "testbed {name}\n  \
         snd  {snd} ─┐                                   ┌─ rcv  {rcv}\n              r1 ══[{shaper} {cap}]══> r2\n  \
         xsnd {xsnd} ─┘                                   └─ xrcv {xrcv}\n  \
         bottleneck: r1 → r2, {cap}, burst {burst} B, buffer {buf}\n  \
         capacity: {measured}\n  \
         delay line: {delay}\n  \
         namespaces: {ns}-{{snd,xsnd,r1,r2,rcv,xrcv}}",
        name = tb.name(),
        snd = Role::Snd.addr(),
        rcv = Role::Rcv.addr(),
        xsnd = Role::Xsnd.addr(),
        xrcv = Role::Xrcv.addr(),
        cap = fmt_rate(c.capacity_bps as f64),
        burst = c.burst(),
        measured = describe_capacity(&tb.capacity()),
        ns = topology::NS_PREFIX.to_string() + tb.name(),
    );
    text + &describe_loss(c)
}

/// The loss line's line in the testbed's description (empty without loss).
fn describe_loss(c: &TestbedConfig) -> String {
    match &c.loss {
        Some(m) => format!(
            "\n  loss line: {m} (expected {:.3}%), snd → rcv before the bottleneck, seed {}",
            m.expected_rate() * 100.0,
            c.loss_seed
        ),
        None => String::new(),
    }
}

/// A web generator's flows, for people (`None` for other kinds).
fn web_summary(g: &GenReport) -> Option<String> {
    (g.flows_started + g.flows_skipped > 0).then(|| {
        format!(
            "web flows: {} started, {} completed, {} skipped (all slots busy), {} failed; {} B delivered",
            g.flows_started, g.flows_completed, g.flows_skipped, g.flows_failed, g.received_bytes
        )
    })
}

/// Whether the loss line's process runs, if it has one.
fn loss_alive(state: Option<&State>) -> Option<bool> {
    state.and_then(|s| s.loss_pid).map(topology::pid_alive)
}

/// What the loss line did, for people.
fn loss_summary(d: &DelayStats) -> String {
    format!(
        "loss line: {} of {} pkts lost = {:.3}% (expected {:.3}%){}",
        d.lost,
        d.seen,
        d.loss_rate * 100.0,
        d.loss_model
            .as_ref()
            .map_or(0.0, |m| m.expected_rate() * 100.0),
        if d.tun_dropped > 0 {
            format!(
                "; {} more dropped because the line fell behind",
                d.tun_dropped
            )
        } else {
            String::new()
        }
    )
}

/// "configured 100 Mbit/s, measured 96.2 Mbit/s (−3.8%)", with a warning past 2%.
pub fn describe_capacity(c: &LinkCapacity) -> String {
    match c.measured_bps {
        None if c.flood_too_slow => format!(
            "configured {} (not measured: a flood from this host cannot backlog it, so it is not \
             the path's bottleneck; the truth uses the configured rate)",
            fmt_rate(c.configured_bps)
        ),
        None => format!(
            "configured {} (not measured: the truth trusts it)",
            fmt_rate(c.configured_bps)
        ),
        Some(m) => format!(
            "configured {}, measured {} ({:+.1}%){}{}",
            fmt_rate(c.configured_bps),
            fmt_rate(m),
            c.deviation() * 100.0,
            if c.off_target() {
                " — WARNING: the shaper misses its rate by more than 2%; the truth uses the measured rate"
            } else {
                ""
            },
            if c.stolen_share > 0.02 {
                format!(
                    " — the host stole {:.0}% of a CPU while it was measured, so the link may be up to {} \
                     (estimates judged against this truth read high by up to that much)",
                    c.stolen_share * 100.0,
                    fmt_rate(c.steal_corrected_bps())
                )
            } else {
                String::new()
            }
        ),
    }
}

fn up(a: UpArgs) -> Result<()> {
    if let Some(t) = &a.topology {
        return crate::topo_cmd::up(&a.name, t, a.json, !a.path.no_measure_capacity);
    }
    let tb = Testbed::up(a.path.config(Some(a.name)), delay_mode_process()?)?;
    let rtt = measure_rtt(&tb, 10).ok();
    if a.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "name": tb.name(), "config": tb.config(), "capacity": tb.capacity(),
                "delay_pid": tb.delay_pid(),
                "namespaces": existing_namespaces(tb.name()), "rtt": rtt,
            }))?
        );
    } else {
        say!("{}", describe(&tb));
        if let Some(r) = &rtt {
            say!(
                "  rtt snd↔rcv: min {:.3} / median {:.3} / max {:.3} ms",
                r.min_ms,
                r.p50_ms,
                r.max_ms
            );
        }
        say!("up; remove with: mgrp testbed down {}", tb.name());
    }
    tb.persist()?;
    Ok(())
}

fn down(a: DownArgs) -> Result<()> {
    mgrp_testbed::netns::check_privileges()?;
    let names: Vec<String> = if a.all {
        list_testbeds()
    } else if a.stale {
        list_testbeds()
            .into_iter()
            .filter(|n| State::load(n).map(|s| s.is_stale()).unwrap_or(true))
            .collect()
    } else if a.names.is_empty() {
        bail!("name a testbed to remove, or use --stale / --all (see `mgrp testbed status`)");
    } else {
        a.names.clone()
    };
    let mut report = Vec::new();
    for n in &names {
        if !a.all && !a.stale && State::load(n).is_none() && existing_namespaces(n).is_empty() {
            bail!("no testbed named {n:?} (see `mgrp testbed status`)");
        }
        let removed = topology::teardown(n)?;
        if !a.json {
            say!(
                "{n}: removed {} namespace(s){}",
                removed.namespaces.len(),
                if removed.processes.is_empty() {
                    String::new()
                } else {
                    format!(", delay line pid {:?}", removed.processes)
                }
            );
        }
        report.push(serde_json::json!({ "name": n, "removed": removed }));
    }
    if a.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else if names.is_empty() {
        say!("nothing to remove");
    }
    Ok(())
}

fn status(a: StatusArgs) -> Result<()> {
    let Some(name) = a.name else {
        let rows: Vec<_> = list_testbeds()
            .into_iter()
            .map(|n| {
                let st = State::load(&n);
                serde_json::json!({
                    "name": n,
                    "namespaces": existing_namespaces(&n).len(),
                    "capacity_bps": st.as_ref().map(|s| s.config.capacity_bps),
                    "measured_capacity_bps": st.as_ref().and_then(|s| s.capacity).and_then(|c| c.measured_bps),
                    "owner": match &st { None => "none (orphaned)".to_string(),
                        Some(s) if s.is_stale() => format!("pid {} (dead: stale)", s.owner_pid.unwrap_or(0)),
                        Some(s) => s.owner_pid.map(|p| format!("pid {p}")).unwrap_or_else(|| "up (persistent)".into()) },
                })
            })
            .collect();
        if a.json {
            say!("{}", serde_json::to_string_pretty(&rows)?);
        } else if rows.is_empty() {
            say!("no testbeds");
        } else {
            say!(
                "{:<24} {:>10} {:>14}  owner",
                "name",
                "namespaces",
                "capacity"
            );
            for r in rows {
                say!(
                    "{:<24} {:>10} {:>14}  {}",
                    r["name"].as_str().unwrap_or(""),
                    r["namespaces"],
                    r["capacity_bps"]
                        .as_u64()
                        .map(|c| fmt_rate(c as f64))
                        .unwrap_or_else(|| "?".into()),
                    r["owner"].as_str().unwrap_or("")
                );
            }
        }
        return Ok(());
    };
    if crate::topo_cmd::is_topology(&name) {
        return crate::topo_cmd::status(&name, a.json);
    }
    mgrp_testbed::netns::check_privileges()?;
    let tb = Testbed::attach(&name)?;
    let ns = existing_namespaces(&name);
    let state = State::load(&name);
    let delay_alive = state
        .as_ref()
        .and_then(|s| s.delay_pid)
        .map(topology::pid_alive);
    let mut counters = mgrp_testbed::truth::CounterSet::open(&tb)?;
    let q = counters.bottleneck()?;
    let delay = tb.delay_stats();
    if a.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "name": name, "config": tb.config(), "capacity": tb.capacity(),
                "namespaces": ns, "bottleneck_qdisc": q,
                "delay_pid": state.as_ref().and_then(|s| s.delay_pid), "delay_alive": delay_alive, "delay_stats": delay,
                "loss_stats": tb.loss_stats(), "loss_alive": loss_alive(state.as_ref()),
            }))?
        );
    } else {
        say!("{}", describe(&tb));
        say!("  namespaces present: {}/6", ns.len());
        say!(
            "  bottleneck qdisc {}: sent {} B / {} pkts, dropped {}, overlimits {}, backlog {} B",
            q.kind,
            q.bytes,
            q.packets,
            q.drops,
            q.overlimits,
            q.backlog
        );
        if let Some(alive) = delay_alive {
            say!(
                "  delay line process: {}",
                if alive {
                    "running"
                } else {
                    "DEAD (reverse path broken; recreate the testbed)"
                }
            );
        }
        if let Some(d) = delay {
            say!(
                "  delay line: {} pkts, late p50 {} us / p99 {} us / max {:.0} us, dropped {}",
                d.packets,
                d.late_us_p50,
                d.late_us_p99,
                d.late_us_max,
                d.dropped
            );
        }
        if let Some(alive) = loss_alive(state.as_ref()) {
            say!(
                "  loss line process: {}",
                if alive {
                    "running"
                } else {
                    "DEAD (path to rcv broken; recreate the testbed)"
                }
            );
        }
        if let Some(l) = tb.loss_stats() {
            say!("  {}", loss_summary(&l));
        }
    }
    Ok(())
}

fn delayline(a: DelaylineArgs) -> Result<()> {
    crate::signals::catch_signals();
    let line = mgrp_testbed::delayline::DelayLine::start_with(
        a.ns,
        &a.dev,
        mgrp_testbed::delayline::LineParams {
            delay: Duration::from_nanos(a.delay_ns),
            loss: a.loss,
            seed: a.loss_seed,
            reorder: None,
        },
    )?;
    while !crate::signals::interrupted() {
        std::thread::sleep(Duration::from_millis(500));
        let _ = std::fs::write(&a.stats, serde_json::to_vec(&line.stats())?);
    }
    line.stop();
    Ok(())
}

fn run_job(a: RunArgs) -> Result<()> {
    if let Some(t) = &a.topology {
        let cfg = mgrp_lab::topo_run::TopoRunConfig {
            topology: t.clone(),
            duration: a.duration,
            bin: a.bin,
            report_every: a.report_every,
            spin: a.spin,
            measure_capacity: !a.path.no_measure_capacity,
        };
        return crate::topo_cmd::run(&cfg, a.json, a.out.as_deref());
    }
    let cfg = RunConfig {
        testbed: a.path.config(None),
        on: a.on.clone(),
        cross: a.cross.iter().flatten().cloned().collect(),
        duration: a.duration,
        bin: a.bin,
        report_every: a.report_every,
        spin: a.spin,
        pings: a.pings,
        estimate: a.estimate,
        dashboard: a.dashboard,
        dashboard_method: a.dashboard_method,
        track: a.track,
    };
    cfg.check()?;
    crate::signals::catch_signals();
    let human = !a.json;
    let patterns = &cfg.cross;
    let mut on_event = |e: Event| {
        match e {
        Event::Warning(w) => eprintln!("mgrp: {w}"),
        _ if !human => {}
        Event::Up(tb) => say!("{}", describe(tb)),
        Event::Rtt(r) => say!(
            "  rtt snd↔rcv ({} pings): min {:.3} / median {:.3} / p90 {:.3} / max {:.3} ms",
            r.sent,
            r.min_ms,
            r.p50_ms,
            r.p90_ms,
            r.max_ms
        ),
        Event::Dashboard(url) => say!(
            "  dashboard: {url} — estimates every second beside the ground truth; Ctrl-C to stop"
        ),
        Event::Started => {
            let names: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
            say!(
                "  cross traffic: {}",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(" + ")
                }
            );
            say!("  rates are Ethernet-frame bits as the shaper counts them; A = C − cross that left the bottleneck\n");
            say!(
                "{:>11} {:>12} {:>12} {:>12} {:>12} {:>8} {:>10}",
                "t (s)",
                "cross B",
                "cross Mb/s",
                "config Mb/s",
                "A Mb/s",
                "drops",
                "backlog B"
            );
        }
        Event::Bin {
            from_s,
            to_s,
            bin: b,
            configured_bps,
        } => say!(
            "{:>5.1}-{:<5.1} {:>12.0} {:>12.3} {:>12} {:>12.3} {:>8.0} {:>10}",
            from_s,
            to_s,
            b.cross_bytes,
            b.cross_bps / 1e6,
            configured_bps.map_or("-".into(), |c| format!("{:.3}", c / 1e6)),
            b.avail_bps / 1e6,
            b.drops,
            b.backlog_bytes
        ),
        Event::Estimate(row) => say!(
            "  estimate {:>5.1}-{:<5.1} {:<9} {:>8.3} Mb/s [{:.3} .. {:.3}]  truth {:>7.3}  error {:+6.1}%  ({}, {} trains, {:.0} kB){}",
            row.start_s,
            row.end_s,
            row.kind,
            row.value_bps / 1e6,
            row.low_bps / 1e6,
            row.high_bps / 1e6,
            row.truth_bps / 1e6,
            row.rel_error * 100.0,
            row.method,
            row.trains,
            row.probe_bytes as f64 / 1e3,
            row.load_share
                .map_or(String::new(), |l| format!("  load {:.2}% of C over the last minute", l * 100.0))
        ),
        Event::Service(c) => say!(
            "  service: {} measurements, {} estimates stored, {:.0} kB of probes",
            c.measurements,
            c.estimates_stored,
            c.probe_bytes as f64 / 1e3
        ),
    }
    };
    let report = mgrp_lab::testbed_run::run(&cfg, crate::signals::hooks(), &mut on_event)?;
    let (start, interrupted) = (report.start_ns, report.interrupted);
    let origin_ns = report.origin_ns;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &a.out {
        std::fs::write(path, &json).with_context(|| format!("write {}", path.display()))?;
    }
    if a.json {
        say!("{json}");
    } else {
        if let Some(s) = &report.summary {
            say!(
                "\nwhole run {:.1}-{:.1} s: C {} | cross {} | A {} | measured flow {} | total sent {} | drops {}",
                s.start_s - (start - origin_ns) as f64 / 1e9,
                s.end_s - (start - origin_ns) as f64 / 1e9,
                fmt_rate(s.capacity_bps),
                fmt_rate(s.cross_bps),
                fmt_rate(s.avail_bps),
                fmt_rate(s.fg_bps),
                fmt_rate(s.total_bps),
                s.drops
            );
        }
        // Only a bottleneck that stayed backlogged for most of the run was draining throughout
        // the sampled intervals; a queue that comes and goes empties between two samples that
        // both saw it, and its "drain" is just its load.
        let run_s = report.summary.as_ref().map_or(0.0, |s| s.end_s - s.start_s);
        if let Some(d) = report
            .run_drain
            .as_ref()
            .filter(|d| d.backlogged_s >= 0.5 * run_s)
        {
            say!(
                "bottleneck drained {} over {:.1} s in which it had a backlog (capacity measured at start: {})",
                fmt_rate(d.bps),
                d.backlogged_s,
                fmt_rate(report.capacity.bps())
            );
        }
        if let Some(c) = &report.capacity_after {
            say!("capacity after the run: {}", describe_capacity(c));
        }
        for g in &report.generators {
            say!(
                "generator {}: sent {} pkts / {} B in {:.2} s ({}), send errors {}, max lag {:.0} us",
                g.pattern,
                g.sent_packets,
                g.sent_bytes,
                g.duration_s,
                fmt_rate(g.sent_bytes as f64 * 8.0 / g.duration_s.max(1e-9)),
                g.send_errors,
                g.max_lag_us
            );
            if let Some(w) = web_summary(g) {
                say!("  {w}");
            }
        }
        if let Some(d) = &report.delay_line {
            say!(
                "delay line: target {:.3} ms, {} pkts held, departure lateness p50 {} / p90 {} / p99 {} / max {:.0} us",
                d.target_delay_s * 1e3,
                d.packets,
                d.late_us_p50,
                d.late_us_p90,
                d.late_us_p99,
                d.late_us_max
            );
        }
        if let Some(l) = &report.loss_line {
            say!("{}", loss_summary(l));
        }
        if let Some(p) = &a.out {
            say!(
                "full series ({} bins of {} ms): {}",
                report.bins.len(),
                a.bin.as_millis(),
                p.display()
            );
        }
        if interrupted {
            say!("interrupted; testbed torn down");
        }
    }
    Ok(())
}

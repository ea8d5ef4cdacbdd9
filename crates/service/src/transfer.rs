//! The transfer modes in the agent: the eBPF congestion controls (`mgrp_control`) registered at
//! start, and their map of paths fed from the agent's own estimates.
//!
//! [`Transfer`] is sans-IO: it takes new estimates (store records) and readings of the
//! background flows' acked bytes with an explicit `now`, and hands back the map writes to make.
//! Every scheduled peer is a destination; `destinations` in the configuration maps a peer's
//! estimates to more; with `passive = true` Wren's estimates feed their flow's destination too,
//! within `max_destinations`. The thread at the bottom ([`start`]) is the only part that
//! touches the kernel: it loads the controls, follows the hub's estimates, samples the acked
//! bytes every 100 ms, and publishes a [`TransferView`] for the API and the metrics. Dropping
//! the controls at stop (in that thread, so in the agent's network namespace) moves the sockets
//! still on a mode to the default congestion control and unregisters the modes.

use crate::config::TransferConfig;
use crate::hub::Hub;
use mgrp_control::{Controls, Feed, Mode, ModeStats, PathEntry};
use mgrp_store::Record;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::broadcast::Receiver;

/// How often the background flows' acked bytes are read (the own-rate correction's resolution).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The window of `own_rate_now_bps` in the API.
const RATE_NOW_NS: u64 = 1_000_000_000;
/// No estimate claims a window longer than this (a bad `elapsed_s` cannot reach back further).
const MAX_WINDOW_NS: u64 = 3_600_000_000_000;
/// How long [`start`] waits for the controls to load before going on without the answer.
const LOAD_WAIT: Duration = Duration::from_secs(15);

mgrp_counters::counters! {
    /// What the transfer modes' feed did.
    pub struct TransferCounters => TransferSnapshot {
        /// Estimates written into the congestion controls' map (one per destination fed)
        entries_written,
        /// Available-bandwidth estimates that fed no destination (not scheduled, not mapped, passive off)
        estimates_ignored,
        /// Passive destinations refused because max_destinations were fed already
        destinations_refused,
        /// Map reads and writes that failed
        map_errors,
        /// Estimates the feed missed because it fell behind
        events_lagged,
    }
}

/// Both clocks at one instant: records carry Unix time, the map CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub mono_ns: u64,
    pub wall_ns: u64,
}

impl Now {
    pub fn read() -> Now {
        Now {
            mono_ns: mgrp_clock::now_ns(),
            wall_ns: mgrp_clock::realtime_ns(),
        }
    }
}

/// Why a destination is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A scheduled peer (`[[path]]`).
    Scheduled,
    /// Named in `destinations`: a peer's estimates feed it.
    Mapped,
    /// A passive flow's destination (`passive = true`).
    Passive,
}

/// A change to the map of paths.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Set(IpAddr, PathEntry),
    Remove(IpAddr),
}

/// One destination's feed and where its last estimate came from.
#[derive(Debug, Clone)]
struct Dest {
    origin: Origin,
    feed: Feed,
    estimates: u64,
    last: Option<Source>,
    acked_bytes: u64,
}

#[derive(Debug, Clone)]
struct Source {
    path: String,
    source: String,
    method: String,
}

/// A destination as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DestinationView {
    pub destination: IpAddr,
    pub origin: Origin,
    /// `SRC->DST`, source (`active`, `passive`) and method of the last estimate fed.
    pub path: Option<String>,
    pub source: Option<String>,
    pub method: Option<String>,
    pub estimates: u64,
    /// A as the last estimate measured it, bit/s.
    pub a_measured_bps: Option<f64>,
    /// The background flows' own rate over that estimate's window, added back to A.
    pub own_rate_bps: Option<f64>,
    /// A as written into the map (measured + own rate), bit/s.
    pub a_written_bps: Option<u64>,
    /// Since the entry was written.
    pub age_s: Option<f64>,
    /// No entry, or one older than `max_age`: the programs run Reno for this destination.
    pub stale: bool,
    /// The background flows' rate to this destination over the last second.
    pub own_rate_now_bps: Option<f64>,
    /// Bytes acked on background flows to it so far.
    pub bg_acked_bytes: u64,
}

/// The feed from estimates to the map: sans-IO.
#[derive(Debug, Clone)]
pub struct Transfer {
    cfg: TransferConfig,
    peers: Vec<IpAddr>,
    dests: BTreeMap<IpAddr, Dest>,
    counts: TransferSnapshot,
}

impl Transfer {
    /// Feeds for every configured destination (`peers`: the scheduled peers' addresses).
    pub fn new(cfg: TransferConfig, peers: &[IpAddr]) -> Result<Transfer, String> {
        Feed::new(cfg.feed)?;
        let mut t = Transfer {
            cfg,
            peers: Vec::new(),
            dests: BTreeMap::new(),
            counts: TransferSnapshot::default(),
        };
        t.reconfigure(t.cfg.clone(), peers);
        Ok(t)
    }

    pub fn config(&self) -> &TransferConfig {
        &self.cfg
    }

    pub fn counters(&self) -> TransferSnapshot {
        self.counts
    }

    /// A new configuration or set of scheduled peers: destinations no longer configured are
    /// dropped (and removed from the map), new ones get a feed, and entries written under
    /// other parameters are written again with the new ones (keeping their time, so they go
    /// stale when they would have). The modes themselves are the loader's business.
    pub fn reconfigure(&mut self, cfg: TransferConfig, peers: &[IpAddr]) -> Vec<Write> {
        let params_changed = cfg.feed != self.cfg.feed;
        self.cfg = cfg;
        self.peers = peers.to_vec();
        let mut writes = Vec::new();
        let keep: BTreeMap<IpAddr, Origin> = self.configured();
        let passive = self.cfg.passive;
        let before = std::mem::take(&mut self.dests);
        for (ip, mut d) in before {
            match keep.get(&ip) {
                Some(o) => d.origin = *o,
                None if passive && d.origin != Origin::Scheduled && d.origin != Origin::Mapped => {}
                None if passive => d.origin = Origin::Passive,
                None => {
                    writes.push(Write::Remove(ip));
                    continue;
                }
            }
            if params_changed {
                if let Some(w) = self.refeed(ip, &mut d) {
                    writes.push(w);
                }
            }
            self.dests.insert(ip, d);
        }
        for (ip, origin) in keep {
            if !self.dests.contains_key(&ip) {
                if let Some(d) = self.fresh_dest(origin) {
                    self.dests.insert(ip, d);
                }
            }
        }
        // Passive destinations kept above the new bound go, the stalest first.
        while self.dests.len() > self.cfg.max_destinations {
            match self.stalest_passive(u64::MAX) {
                Some(ip) => {
                    self.dests.remove(&ip);
                    writes.push(Write::Remove(ip));
                }
                None => break,
            }
        }
        writes
    }

    /// The configured destinations and why each is fed.
    fn configured(&self) -> BTreeMap<IpAddr, Origin> {
        let mut m = BTreeMap::new();
        for to in self.cfg.destinations.values() {
            for ip in to {
                m.insert(*ip, Origin::Mapped);
            }
        }
        for ip in &self.peers {
            m.insert(*ip, Origin::Scheduled);
        }
        m
    }

    fn fresh_dest(&self, origin: Origin) -> Option<Dest> {
        Some(Dest {
            origin,
            feed: Feed::new(self.cfg.feed).ok()?,
            estimates: 0,
            last: None,
            acked_bytes: 0,
        })
    }

    /// A destination's feed under the current parameters; its last entry rewritten with them.
    fn refeed(&self, ip: IpAddr, d: &mut Dest) -> Option<Write> {
        let last = d.feed.reconfigure(self.cfg.feed).ok()??;
        Some(Write::Set(ip, last.entry))
    }

    /// The destinations whose background bytes are sampled.
    pub fn destinations(&self) -> Vec<IpAddr> {
        self.dests.keys().copied().collect()
    }

    /// A reading of the bytes acked on background flows to `ip` so far.
    pub fn handle_acked(&mut self, now_ns: u64, ip: IpAddr, total_bytes: u64) {
        if let Some(d) = self.dests.get_mut(&ip) {
            if d.feed.handle_acked(now_ns, total_bytes) {
                d.acked_bytes = total_bytes;
            }
        }
    }

    pub fn count_map_error(&mut self) {
        self.counts.map_errors += 1;
    }

    pub fn count_lagged(&mut self, n: u64) {
        self.counts.events_lagged += n;
    }

    /// A record the hub published: the map writes it calls for (none unless it is a final
    /// available-bandwidth estimate of a path whose destination is fed).
    pub fn handle_record(&mut self, now: Now, rec: &Record) -> Vec<Write> {
        if rec.metric != "avail_bw" || !rec.final_ || !rec.value.is_finite() {
            return Vec::new();
        }
        let Some(dst) = destination(&rec.path) else {
            return Vec::new();
        };
        let passive = rec.source == "passive";
        if passive && !self.cfg.passive {
            self.counts.estimates_ignored += 1;
            return Vec::new();
        }
        let (from, to) = window(now, rec);
        let mut writes = Vec::new();
        let mut targets = vec![dst];
        targets.extend(self.cfg.destinations.get(&dst).into_iter().flatten());
        for ip in targets {
            // Only a passive flow's destination joins here; configured ones are there already.
            let fed =
                self.dests.contains_key(&ip) || passive && self.admit(now.mono_ns, ip, &mut writes);
            if !fed {
                continue;
            }
            let Some(d) = self.dests.get_mut(&ip) else {
                continue;
            };
            let decision = d.feed.handle_estimate(now.mono_ns, rec.value, from, to);
            d.estimates += 1;
            d.last = Some(Source {
                path: rec.path.clone(),
                source: rec.source.clone(),
                method: rec.method.clone(),
            });
            writes.push(Write::Set(ip, decision.entry));
        }
        let fed = writes
            .iter()
            .filter(|w| matches!(w, Write::Set(..)))
            .count() as u64;
        if fed == 0 {
            self.counts.estimates_ignored += 1;
        }
        self.counts.entries_written += fed;
        writes
    }

    /// Make room for a passive destination: a free slot, or the stalest passive one's if it
    /// is stale; refused (and counted) otherwise.
    fn admit(&mut self, now_ns: u64, ip: IpAddr, writes: &mut Vec<Write>) -> bool {
        if self.dests.len() >= self.cfg.max_destinations {
            let max_age = self.cfg.feed.params.max_age.as_nanos() as u64;
            match self.stalest_passive(now_ns.saturating_sub(max_age)) {
                Some(old) => {
                    self.dests.remove(&old);
                    writes.push(Write::Remove(old));
                }
                None => {
                    self.counts.destinations_refused += 1;
                    return false;
                }
            }
        }
        match self.fresh_dest(Origin::Passive) {
            Some(d) => {
                self.dests.insert(ip, d);
                true
            }
            None => false,
        }
    }

    /// The passive destination written longest ago, if that was before `before_ns`.
    fn stalest_passive(&self, before_ns: u64) -> Option<IpAddr> {
        self.dests
            .iter()
            .filter(|(_, d)| d.origin == Origin::Passive)
            .map(|(ip, d)| (d.feed.last().map_or(0, |l| l.entry.updated_ns), *ip))
            .filter(|(t, _)| *t < before_ns)
            .min()
            .map(|(_, ip)| ip)
    }

    /// Every destination as the API shows it at `now_ns` (CLOCK_MONOTONIC).
    pub fn view(&self, now_ns: u64) -> Vec<DestinationView> {
        let max_age = self.cfg.feed.params.max_age.as_nanos() as u64;
        self.dests
            .iter()
            .map(|(ip, d)| {
                let last = d.feed.last();
                let age = last.map(|l| now_ns.saturating_sub(l.entry.updated_ns));
                DestinationView {
                    destination: *ip,
                    origin: d.origin,
                    path: d.last.as_ref().map(|s| s.path.clone()),
                    source: d.last.as_ref().map(|s| s.source.clone()),
                    method: d.last.as_ref().map(|s| s.method.clone()),
                    estimates: d.estimates,
                    a_measured_bps: last.map(|l| l.measured_bps),
                    own_rate_bps: last.map(|l| l.own_rate_bps),
                    a_written_bps: last.map(|l| l.entry.avail_bps),
                    age_s: age.map(|a| a as f64 / 1e9),
                    stale: age.is_none_or(|a| a > max_age),
                    own_rate_now_bps: d
                        .feed
                        .own_rate_bps(now_ns.saturating_sub(RATE_NOW_NS), now_ns),
                    bg_acked_bytes: d.acked_bytes,
                }
            })
            .collect()
    }
}

/// The destination of a `SRC->DST` path.
fn destination(path: &str) -> Option<IpAddr> {
    path.rsplit_once("->")?.1.trim().parse().ok()
}

/// A record's measured window on CLOCK_MONOTONIC: it ends at its `t_ns` (Unix time, moved to
/// the monotonic clock by how long ago that was) and lasts its `elapsed_s`. A record from the
/// future ends now.
pub fn window(now: Now, rec: &Record) -> (u64, u64) {
    let ago = now.wall_ns.saturating_sub(rec.t_ns);
    let end = now.mono_ns.saturating_sub(ago);
    let len = if rec.elapsed_s.is_finite() && rec.elapsed_s > 0.0 {
        ((rec.elapsed_s * 1e9) as u64).min(MAX_WINDOW_NS)
    } else {
        0
    };
    (end.saturating_sub(len), end)
}

// ---- the kernel side ----------------------------------------------------------------------

/// What the feed needs of the loaded controls (a trait so the loop is tested without BPF).
pub trait ModeMaps {
    fn set_path(&self, dst: IpAddr, entry: &PathEntry) -> Result<(), String>;
    fn remove_path(&self, dst: IpAddr) -> Result<(), String>;
    fn bg_acked_bytes(&self, dst: IpAddr) -> Result<u64, String>;
    fn stats(&self) -> Result<Vec<ModeStats>, String>;
}

impl ModeMaps for Controls {
    fn set_path(&self, dst: IpAddr, entry: &PathEntry) -> Result<(), String> {
        Controls::set_path(self, dst, entry).map_err(|e| e.to_string())
    }
    fn remove_path(&self, dst: IpAddr) -> Result<(), String> {
        Controls::remove_path(self, dst).map_err(|e| e.to_string())
    }
    fn bg_acked_bytes(&self, dst: IpAddr) -> Result<u64, String> {
        Controls::bg_acked_bytes(self, dst).map_err(|e| e.to_string())
    }
    fn stats(&self) -> Result<Vec<ModeStats>, String> {
        Controls::stats(self).map_err(|e| e.to_string())
    }
}

/// Apply map writes, counting the ones that fail.
pub fn apply(core: &mut Transfer, maps: &dyn ModeMaps, writes: Vec<Write>) {
    for w in writes {
        let r = match &w {
            Write::Set(ip, e) => maps.set_path(*ip, e),
            Write::Remove(ip) => maps.remove_path(*ip),
        };
        if r.is_err() {
            core.count_map_error();
        }
    }
}

/// One round of the feed: the estimates published since the last round, then a reading of
/// every destination's background bytes.
pub fn tick(core: &mut Transfer, maps: &dyn ModeMaps, rx: &mut Receiver<Arc<Record>>, now: Now) {
    loop {
        match rx.try_recv() {
            Ok(rec) => {
                let w = core.handle_record(now, &rec);
                apply(core, maps, w);
            }
            Err(TryRecvError::Lagged(n)) => core.count_lagged(n),
            Err(TryRecvError::Empty) | Err(TryRecvError::Closed) => break,
        }
    }
    for ip in core.destinations() {
        match maps.bg_acked_bytes(ip) {
            Ok(b) => core.handle_acked(now.mono_ns, ip, b),
            Err(_) => core.count_map_error(),
        }
    }
}

/// The transfer modes' parameters as the API shows them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamsView {
    pub g: f64,
    pub h: u32,
    pub max_age_s: f64,
    pub threshold_pkts: u32,
    pub floor_pkts: u32,
    pub probe: bool,
    pub jump_start: bool,
    pub correct_own_rate: bool,
    pub passive: bool,
    pub max_destinations: usize,
}

impl From<&TransferConfig> for ParamsView {
    fn from(c: &TransferConfig) -> Self {
        let p = &c.feed.params;
        ParamsView {
            g: p.g,
            h: p.h,
            max_age_s: p.max_age.as_secs_f64(),
            threshold_pkts: p.threshold_pkts,
            floor_pkts: p.floor_pkts,
            probe: p.probe,
            jump_start: p.jump_start,
            correct_own_rate: c.feed.correct_own_rate,
            passive: c.passive,
            max_destinations: c.max_destinations,
        }
    }
}

/// `GET /v1/transfer`: whether the modes run here (and why not), their counters, and what the
/// map holds per destination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransferView {
    /// The configuration has a `[transfer]` section.
    pub configured: bool,
    /// The congestion controls are registered and fed.
    pub available: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// The modes asked for, and those registered now.
    pub modes_configured: Vec<Mode>,
    pub modes: Vec<Mode>,
    pub congestion_controls: Vec<&'static str>,
    pub params: Option<ParamsView>,
    /// Per mode, from the programs' counters.
    pub stats: Vec<ModeStats>,
    pub destinations: Vec<DestinationView>,
    pub counters: TransferSnapshot,
}

impl TransferView {
    pub fn not_configured() -> TransferView {
        TransferView {
            configured: false,
            available: false,
            reason: Some("no [transfer] section in the agent's configuration".into()),
            modes_configured: Vec::new(),
            modes: Vec::new(),
            congestion_controls: Vec::new(),
            params: None,
            stats: Vec::new(),
            destinations: Vec::new(),
            counters: TransferSnapshot::default(),
        }
    }

    pub(crate) fn configured(cfg: &TransferConfig, reason: Option<String>) -> TransferView {
        TransferView {
            configured: true,
            reason,
            modes_configured: cfg.modes.clone(),
            params: Some(cfg.into()),
            ..TransferView::not_configured()
        }
    }
}

/// A running transfer feed as the hub and the API see it.
pub struct TransferState {
    view: Mutex<TransferView>,
    stop: AtomicBool,
    /// A reload's new configuration and peers, taken by the thread at its next round.
    reconfig: Mutex<Option<(TransferConfig, Vec<IpAddr>)>>,
}

impl TransferState {
    pub fn view(&self) -> TransferView {
        self.view
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|_| TransferView::not_configured())
    }

    fn set_view(&self, v: TransferView) {
        if let Ok(mut g) = self.view.lock() {
            *g = v;
        }
    }

    pub fn available(&self) -> bool {
        self.view().available
    }

    /// A state that shows `view` (tests of what reads it).
    #[cfg(test)]
    pub(crate) fn fixed(view: TransferView) -> TransferState {
        TransferState {
            view: Mutex::new(view),
            stop: AtomicBool::new(false),
            reconfig: Mutex::new(None),
        }
    }
}

/// The thread that owns the loaded controls.
pub(crate) struct TransferRun {
    pub state: Arc<TransferState>,
    pub modes: Vec<Mode>,
    thread: Option<JoinHandle<()>>,
}

impl TransferRun {
    /// Hand a reload's configuration to the running feed (same modes).
    pub fn reconfigure(&self, cfg: TransferConfig, peers: Vec<IpAddr>) {
        if let Ok(mut g) = self.state.reconfig.lock() {
            *g = Some((cfg, peers));
        }
    }

    /// Stop feeding, move the sockets still on a mode to the default, unregister the modes.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TransferRun {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Load the modes and start feeding them from the hub's estimates. Loading is tried once, on
/// the new thread (which stays in the caller's network namespace); when it fails the agent
/// says why on stderr and in its API, and runs on without the modes.
pub(crate) fn start(
    cfg: &TransferConfig,
    peers: Vec<IpAddr>,
    hub: &Hub,
) -> Result<TransferRun, crate::Error> {
    let core = Transfer::new(cfg.clone(), &peers).map_err(crate::Error::Transfer)?;
    let state = Arc::new(TransferState {
        view: Mutex::new(TransferView::configured(
            cfg,
            Some("loading the congestion controls".into()),
        )),
        stop: AtomicBool::new(false),
        reconfig: Mutex::new(None),
    });
    // Subscribed before any schedule runs, so the first estimate is not missed.
    let rx = hub.subscribe();
    let (tx, loaded) = mpsc::channel();
    let st = state.clone();
    let thread = std::thread::Builder::new()
        .name("transfer".into())
        .spawn(move || run(core, &st, rx, tx))
        .map_err(|e| crate::Error::Thread("transfer", e))?;
    match loaded.recv_timeout(LOAD_WAIT) {
        Ok(Ok(modes)) => eprintln!(
            "mgrp agent: transfer modes registered: {}",
            modes
                .iter()
                .map(|m| m.cc_name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Ok(Err(why)) => {
            eprintln!(
                "mgrp agent: transfer modes unavailable, the agent runs on without them: {why}"
            )
        }
        Err(_) => eprintln!("mgrp agent: transfer modes still loading after {LOAD_WAIT:?}"),
    }
    Ok(TransferRun {
        state,
        modes: cfg.modes.clone(),
        thread: Some(thread),
    })
}

fn run(
    mut core: Transfer,
    st: &TransferState,
    mut rx: Receiver<Arc<Record>>,
    loaded: mpsc::Sender<Result<Vec<Mode>, String>>,
) {
    let controls = match Controls::load(&core.config().modes) {
        Ok(c) => c,
        Err(e) => {
            let why = e.to_string();
            st.set_view(TransferView::configured(core.config(), Some(why.clone())));
            let _ = loaded.send(Err(why));
            return;
        }
    };
    let _ = loaded.send(Ok(controls.modes()));
    while !st.stop.load(Ordering::Relaxed) {
        let next = mgrp_clock::now_ns() + SAMPLE_EVERY.as_nanos() as u64;
        if let Some((cfg, peers)) = st.reconfig.lock().ok().and_then(|mut g| g.take()) {
            let w = core.reconfigure(cfg, &peers);
            apply(&mut core, &controls, w);
        }
        let now = Now::read();
        tick(&mut core, &controls, &mut rx, now);
        st.set_view(live_view(&core, &controls, now.mono_ns));
        mgrp_clock::sleep_until(next);
    }
    let moved = controls.reset_sockets().unwrap_or(0);
    drop(controls);
    eprintln!(
        "mgrp agent: transfer modes unregistered ({moved} sockets moved to the default congestion control)"
    );
}

fn live_view(core: &Transfer, controls: &Controls, now_ns: u64) -> TransferView {
    let modes = controls.modes();
    TransferView {
        available: true,
        reason: None,
        congestion_controls: modes.iter().map(|m| m.cc_name()).collect(),
        modes,
        stats: ModeMaps::stats(controls).unwrap_or_default(),
        destinations: core.view(now_ns),
        counters: core.counters(),
        ..TransferView::configured(core.config(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    const S: u64 = 1_000_000_000;
    const WALL0: u64 = 1_795_000_000 * S;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn rec(path: &str, source: &str, value: f64, t_ns: u64, elapsed_s: f64) -> Record {
        Record {
            path: path.into(),
            metric: "avail_bw".into(),
            t_ns,
            value,
            low: value,
            high: value,
            method: "auto:slops".into(),
            source: source.into(),
            probe_bytes: 0,
            trains: 1,
            confidence: 1.0,
            elapsed_s,
            final_: true,
            timescale_ms: None,
        }
    }

    /// Monotonic 100 s ↔ Unix WALL0 + 100 s.
    fn at(secs: u64) -> Now {
        Now {
            mono_ns: secs * S,
            wall_ns: WALL0 + secs * S,
        }
    }

    const PEER: &str = "198.18.3.2";
    const PATH: &str = "198.18.1.2->198.18.3.2";

    fn core(cfg: TransferConfig) -> Transfer {
        Transfer::new(cfg, &[ip(PEER)]).unwrap()
    }

    #[test]
    fn an_estimate_feeds_its_peer_and_the_mapped_destinations() {
        let mut cfg = TransferConfig::default();
        cfg.destinations
            .insert(ip(PEER), vec![ip("198.18.3.9"), ip("fd00::9")]);
        let mut t = core(cfg);
        assert_eq!(t.destinations().len(), 3);
        let w = t.handle_record(at(100), &rec(PATH, "active", 12e6, WALL0 + 100 * S, 2.0));
        let ips: Vec<IpAddr> = w
            .iter()
            .map(|w| match w {
                Write::Set(ip, e) => {
                    assert_eq!(
                        (e.avail_bps, e.updated_ns, e.g_milli),
                        (12_000_000, 100 * S, 900)
                    );
                    *ip
                }
                Write::Remove(_) => panic!("{w:?}"),
            })
            .collect();
        assert_eq!(ips, vec![ip(PEER), ip("198.18.3.9"), ip("fd00::9")]);
        assert_eq!(t.counters().entries_written, 3);
        let v = t.view(101 * S);
        assert_eq!(v[0].origin, Origin::Scheduled);
        assert_eq!(v[0].path.as_deref(), Some(PATH));
        assert_eq!(
            (v[0].a_measured_bps, v[0].a_written_bps),
            (Some(12e6), Some(12_000_000))
        );
        assert_eq!(v[0].age_s, Some(1.0));
        assert!(!v[0].stale);
        assert!(v.iter().skip(1).all(|d| d.origin == Origin::Mapped));
        // Past max_age (10 s) the entry is stale.
        assert!(t.view(111 * S)[0].stale);
    }

    #[test]
    fn other_records_feed_nothing() {
        let mut t = core(TransferConfig::default());
        let mut r = rec(PATH, "active", 5e6, WALL0, 1.0);
        r.metric = "capacity".into();
        assert!(t.handle_record(at(1), &r).is_empty());
        let mut r = rec(PATH, "active", 5e6, WALL0, 1.0);
        r.final_ = false;
        assert!(t.handle_record(at(1), &r).is_empty());
        assert!(t
            .handle_record(at(1), &rec(PATH, "active", f64::NAN, WALL0, 1.0))
            .is_empty());
        assert!(t
            .handle_record(at(1), &rec("garbage", "active", 5e6, WALL0, 1.0))
            .is_empty());
        // Not a scheduled peer; a passive estimate with passive off.
        assert!(t
            .handle_record(at(1), &rec("a->10.0.0.1", "active", 5e6, WALL0, 1.0))
            .is_empty());
        assert!(t
            .handle_record(at(1), &rec(PATH, "passive", 5e6, WALL0, 1.0))
            .is_empty());
        assert_eq!(t.counters().estimates_ignored, 2);
        assert_eq!(t.counters().entries_written, 0);
        assert!(t
            .view(2 * S)
            .iter()
            .all(|d| d.stale && d.a_written_bps.is_none()));
    }

    #[test]
    fn the_window_comes_from_the_record_on_the_monotonic_clock() {
        // Ended 3 s ago (Unix), lasted 2 s: [now − 5 s, now − 3 s] on CLOCK_MONOTONIC.
        let r = rec(PATH, "active", 1.0, WALL0 + 97 * S, 2.0);
        assert_eq!(window(at(100), &r), (95 * S, 97 * S));
        // No duration: a point; from the future: ends now; nonsense lengths are bounded.
        assert_eq!(
            window(at(100), &rec(PATH, "a", 1.0, WALL0 + 100 * S, 0.0)),
            (100 * S, 100 * S)
        );
        assert_eq!(
            window(at(100), &rec(PATH, "a", 1.0, WALL0 + 200 * S, 1.0)),
            (99 * S, 100 * S)
        );
        let far = window(at(10_000), &rec(PATH, "a", 1.0, WALL0 + 10_000 * S, 1e300));
        assert_eq!(far.1 - far.0, MAX_WINDOW_NS);
        assert_eq!(window(at(1), &rec(PATH, "a", 1.0, 0, f64::NAN)), (0, 0));
    }

    #[test]
    fn the_own_rate_over_the_window_is_added_back() {
        let mut t = core(TransferConfig::default());
        // A background flow at 8 Mbit/s (1 MB/s), sampled every 100 ms.
        for i in 0..=100u64 {
            t.handle_acked(i * S / 10, ip(PEER), i * 100_000);
        }
        let w = t.handle_record(at(10), &rec(PATH, "active", 4e6, WALL0 + 10 * S, 4.0));
        let Write::Set(_, e) = w[0] else { panic!() };
        assert_eq!(e.avail_bps, 12_000_000);
        let v = &t.view(10 * S)[0];
        assert_eq!(v.own_rate_bps, Some(8e6));
        assert_eq!(v.a_measured_bps, Some(4e6));
        assert!((v.own_rate_now_bps.unwrap() - 8e6).abs() < 1.0);
        assert_eq!(v.bg_acked_bytes, 10_000_000);
        // Without the correction the measured A is written as it is.
        let mut t = core(TransferConfig {
            feed: mgrp_control::FeedConfig {
                correct_own_rate: false,
                ..Default::default()
            },
            ..Default::default()
        });
        for i in 0..=100u64 {
            t.handle_acked(i * S / 10, ip(PEER), i * 100_000);
        }
        let w = t.handle_record(at(10), &rec(PATH, "active", 4e6, WALL0 + 10 * S, 4.0));
        let Write::Set(_, e) = w[0] else { panic!() };
        assert_eq!(e.avail_bps, 4_000_000);
    }

    #[test]
    fn passive_destinations_are_bounded_and_the_stale_make_room() {
        let mut t = core(TransferConfig {
            passive: true,
            max_destinations: 3,
            ..Default::default()
        });
        let p = |d: &str| {
            rec(
                &format!("198.18.1.2->{d}"),
                "passive",
                3e6,
                WALL0 + 100 * S,
                1.0,
            )
        };
        assert_eq!(t.handle_record(at(100), &p("10.0.0.1")).len(), 1);
        assert_eq!(t.handle_record(at(101), &p("10.0.0.2")).len(), 1);
        // Full (the peer and two passive ones), nothing stale: refused.
        assert!(t.handle_record(at(102), &p("10.0.0.3")).is_empty());
        assert_eq!(t.counters().destinations_refused, 1);
        // 10.0.0.1 went stale (written at 100 s, max_age 10 s): it makes room.
        let w = t.handle_record(at(111), &p("10.0.0.3"));
        assert_eq!(w[0], Write::Remove(ip("10.0.0.1")));
        assert!(matches!(w[1], Write::Set(d, _) if d == ip("10.0.0.3")));
        let v = t.view(111 * S);
        assert_eq!(v.len(), 3);
        assert_eq!(v.iter().filter(|d| d.origin == Origin::Passive).count(), 2);
        // A passive estimate of a scheduled peer feeds it like an active one.
        assert_eq!(
            t.handle_record(at(112), &rec(PATH, "passive", 7e6, WALL0, 1.0))
                .len(),
            1
        );
        // Readings for destinations that are not fed are ignored.
        t.handle_acked(112 * S, ip("10.9.9.9"), 5);
        assert_eq!(t.destinations().len(), 3);
    }

    #[test]
    fn reconfiguring_drops_adds_and_rewrites() {
        let mut t = core(TransferConfig {
            passive: true,
            ..Default::default()
        });
        t.handle_record(at(100), &rec(PATH, "active", 10e6, WALL0 + 100 * S, 1.0));
        t.handle_record(
            at(100),
            &rec("x->10.0.0.7", "passive", 2e6, WALL0 + 100 * S, 1.0),
        );
        // New g, the peer unscheduled, passive off, a new peer.
        let mut cfg = TransferConfig::default();
        cfg.feed.params.g = 0.5;
        let w = t.reconfigure(cfg, &[ip("198.18.3.3")]);
        assert!(w.contains(&Write::Remove(ip(PEER))), "{w:?}");
        assert!(w.contains(&Write::Remove(ip("10.0.0.7"))), "{w:?}");
        assert_eq!(t.destinations(), vec![ip("198.18.3.3")]);
        // The same peer again with another g: its entry is rewritten, keeping its time.
        let mut t = core(TransferConfig::default());
        t.handle_record(at(100), &rec(PATH, "active", 10e6, WALL0 + 100 * S, 1.0));
        let mut cfg = TransferConfig::default();
        cfg.feed.params.g = 0.5;
        let w = t.reconfigure(cfg, &[ip(PEER)]);
        let Write::Set(d, e) = w[0] else {
            panic!("{w:?}")
        };
        assert_eq!(
            (d, e.g_milli, e.avail_bps, e.updated_ns),
            (ip(PEER), 500, 10_000_000, 100 * S)
        );
        // The view still shows it, and the samples stay.
        assert_eq!(t.view(100 * S)[0].a_written_bps, Some(10_000_000));
        // Unchanged: no writes.
        let same = t.config().clone();
        assert!(t.reconfigure(same, &[ip(PEER)]).is_empty());
        // A smaller bound pushes out passive destinations.
        let mut t = core(TransferConfig {
            passive: true,
            ..Default::default()
        });
        for i in 1..=5 {
            t.handle_record(
                at(100 + i),
                &rec(&format!("x->10.0.0.{i}"), "passive", 1e6, 0, 1.0),
            );
        }
        let cfg = TransferConfig {
            passive: true,
            max_destinations: 3,
            ..Default::default()
        };
        let w = t.reconfigure(cfg, &[ip(PEER)]);
        assert_eq!(
            w,
            vec![
                Write::Remove(ip("10.0.0.1")),
                Write::Remove(ip("10.0.0.2")),
                Write::Remove(ip("10.0.0.3"))
            ]
        );
        assert_eq!(t.destinations().len(), 3);
    }

    /// The maps in memory; `fail` makes every call fail.
    #[derive(Default)]
    struct FakeMaps {
        paths: RefCell<HashMap<IpAddr, PathEntry>>,
        acked: RefCell<HashMap<IpAddr, u64>>,
        fail: bool,
    }

    impl ModeMaps for FakeMaps {
        fn set_path(&self, dst: IpAddr, entry: &PathEntry) -> Result<(), String> {
            if self.fail {
                return Err("no".into());
            }
            self.paths.borrow_mut().insert(dst, *entry);
            Ok(())
        }
        fn remove_path(&self, dst: IpAddr) -> Result<(), String> {
            self.paths.borrow_mut().remove(&dst);
            Ok(())
        }
        fn bg_acked_bytes(&self, dst: IpAddr) -> Result<u64, String> {
            if self.fail {
                return Err("no".into());
            }
            Ok(self.acked.borrow().get(&dst).copied().unwrap_or(0))
        }
        fn stats(&self) -> Result<Vec<ModeStats>, String> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_tick_feeds_published_estimates_and_samples_the_flows() {
        let (tx, mut rx) = tokio::sync::broadcast::channel(4);
        let maps = FakeMaps::default();
        let mut t = core(TransferConfig::default());
        // 1 MB acked between two ticks 1 s apart: 8 Mbit/s of background traffic.
        tick(&mut t, &maps, &mut rx, at(99));
        maps.acked.borrow_mut().insert(ip(PEER), 1_000_000);
        tick(&mut t, &maps, &mut rx, at(100));
        tx.send(Arc::new(rec(PATH, "active", 5e6, WALL0 + 100 * S, 1.0)))
            .unwrap();
        tick(&mut t, &maps, &mut rx, at(100));
        assert_eq!(maps.paths.borrow()[&ip(PEER)].avail_bps, 13_000_000);
        // Six estimates into a channel of four: two missed, counted.
        for _ in 0..6 {
            tx.send(Arc::new(rec(PATH, "active", 5e6, WALL0 + 100 * S, 1.0)))
                .unwrap();
        }
        tick(&mut t, &maps, &mut rx, at(101));
        assert_eq!(t.counters().events_lagged, 2);
        assert_eq!(t.counters().entries_written, 5);
        // Failing maps are counted, not fatal.
        let bad = FakeMaps {
            fail: true,
            ..Default::default()
        };
        tx.send(Arc::new(rec(PATH, "active", 5e6, WALL0, 1.0)))
            .unwrap();
        tick(&mut t, &bad, &mut rx, at(102));
        assert_eq!(t.counters().map_errors, 2);
    }

    #[test]
    fn views_say_why_not() {
        let v = TransferView::not_configured();
        assert!(!v.configured && !v.available);
        assert!(v.reason.unwrap().contains("[transfer]"));
        let v = TransferView::configured(&TransferConfig::default(), Some("not root".into()));
        assert!(v.configured && !v.available);
        assert_eq!(v.modes_configured, Mode::ALL.to_vec());
        assert_eq!(v.params.unwrap().g, 0.9);
        let j = serde_json::to_value(TransferView::not_configured()).unwrap();
        assert_eq!(j["available"], false);
        assert!(j["counters"]["entries_written"].is_u64());
    }
}

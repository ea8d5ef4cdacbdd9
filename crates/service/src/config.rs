//! The agent's configuration file (TOML): where estimates are kept and which paths to keep
//! fresh, how often, with which method, within which probe-byte budget.
//!
//! ```toml
//! store = "/var/lib/mgrp/estimates.db"   # ":memory:" keeps nothing; or a PostgreSQL URL
//! archive = "postgresql://mgrp@archive.example/mgrp"   # also push every estimate there
//! retention = "7d"                       # raw estimates; 1 min / 1 h aggregates stay
//! http = "127.0.0.1:7241"                # the HTTP API ("off" for none)
//! token_file = "/etc/mgrp/api-token"     # required by clients that are not on localhost
//!
//! [[path]]
//! peer = "198.18.3.2"                    # IP or IP:PORT of the peer's agent
//! method = "track"                       # the default: hold the estimate with short checks
//!                                        # (docs/tracking.md); auto, slops, slops-slow, chirp,
//!                                        # sweep; or loss_episodes (badabing)
//! every = "10s"                          # (track: least time between rounds, default 100ms)
//! ceiling = "2%"                         # probe load at most this share of the capacity
//!                                        # (default 2% for track, none for the others)
//! budget = "2mb"                         # probe bytes per minute on this path (default:
//!                                        # what one estimate costs at the path's capacity, x2)
//!
//! [riders]                               # the host's own packets ride in probe padding
//! opt_in = ["to:198.18.3.2"]             # to:PREFIX, tcp:PORT, udp:PORT, mark:N
//! hold = "10ms"                          # T: the longest a packet waits for a probe
//! ratio = 1.0                            # share of each train (from its start) that carries
//! elastic = false                        # elastic trains: wait for riders (at most
//! elastic_wait = "10ms"                  #   elastic_wait, never past a held packet's
//! elastic_share = 0.2                    #   deadline) and end early past elastic_share of
//!                                        #   the train when none are left; elastic_share
//!                                        #   = 1.0, elastic_wait = "60ms", hold = "80ms":
//!                                        #   whole trains that wait (docs/riders.md); T
//!                                        #   must cover a stream: its bytes / the host's
//!                                        #   rate (130ms/160ms at 100 Mbit/s beside 4)
//!
//! [inline]                               # ImTCP: opted-in TCP flows measure their path
//! opt_in = ["tcp:5001"]                  # to:PREFIX, tcp:PORT, mark:N (not riders' too)
//! access = "1gbit"                       # the sender's access rate (first range's top)
//!
//! [[passive]]                            # Wren on the host's own TCP traffic, no probes
//! iface = "eth0"
//! flow = "tcp port 443"                  # optional capture filter
//! window = "1s"                          # one estimate per flow per window
//! peer = "198.18.3.2:7240"               # optional: the receiving host's agent; adds two-sided
//!                                        # Wren (`wren2`) on flows sent to it (docs/passive.md)
//!
//! [transfer]                             # eBPF transfer modes fed by these estimates
//! modes = ["background", "full-speed", "ledbat"]   # congestion controls to register (default all)
//! g = 0.9                                # background: share of A a flow may use
//! h = 100                                # full-speed: growth factor toward A·RTT
//! max_age = "10s"                        # older estimates are not acted on (Reno instead)
//! threshold_pkts = 0                     # background: cap only above this window (seed: 25)
//! floor_pkts = 2                         # background: below it, cap at no less (seed: 0)
//! probe = true                           # background: lift the cap while the path has no queue
//! jump_start = true                      # full-speed: a new connection starts at V, paced
//! correct_own_rate = true                # add background flows' own rate back to A
//! passive = false                        # Wren estimates feed their flow's destination too
//! max_destinations = 256                 # map entries the agent keeps
//! destinations = { "198.18.3.2" = ["198.18.3.9"] }   # a peer's estimates also feed these
//!
//! [mpat]                                 # MPAT aggregates (mgrp_mpat), more over /v1/mpat
//! [[mpat.aggregate]]
//! name = "video"
//! members = [{ dst = "198.18.3.2", port = 443, weight = 5 }, { dst = "198.18.3.2", weight = 1 }]
//!
//! [map]                                  # Netmapper from this agent, served at /v1/map
//! agents = ["198.18.1.2", "198.18.2.2"]  # every = "1h", budget = "200MB", max_parallel = 8
//! ```

use mgrp_control::{FeedConfig, Mode, PathParams};
use mgrp_estimate::methods::Method;
use mgrp_traffic::units::{parse_bytes, parse_duration};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {why}")]
    Bad { path: String, why: String },
}

/// What is wrong with a configuration's text (the entry and why).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// The probe load's default ceiling for tracked paths, as a share of capacity.
pub const DEFAULT_CEILING: f64 = 0.02;

#[derive(Debug, Clone, PartialEq)]
pub struct PathSchedule {
    pub peer: SocketAddr,
    pub method: String,
    pub every: Duration,
    /// Probe bytes per minute; `None`: the default, derived from what one estimate of the
    /// method costs at the path's capacity (`crate::budget`).
    pub budget: Option<u64>,
    /// The probe load's ceiling as a share of the path's capacity (0, 1]; `None`: none.
    pub ceiling: Option<f64>,
}

/// Passive measurement (Wren) of the TCP traffic an interface carries.
#[derive(Debug, Clone, PartialEq)]
pub struct PassiveSource {
    pub iface: String,
    /// A capture filter (pcap syntax) ANDed with `tcp`.
    pub flow: Option<String>,
    pub window: Duration,
    /// The peer agent (control address) of the monitored flows: with it, two-sided Wren
    /// (`wren2`) runs beside one-sided Wren on the flows sent to that host.
    pub peer: Option<SocketAddr>,
}

/// Riders: which of the host's traffic rides in this agent's probes.
#[derive(Debug, Clone, PartialEq)]
pub struct RidersConfig {
    pub dev: String,
    pub opt_in: Vec<mgrp_shim::route::OptIn>,
    pub hold: Duration,
    pub ratio: f64,
    /// Elastic trains (seed 000 §8.3): wait for riders, end early without them (`None`: off).
    pub elastic: Option<mgrp_engine::riders::ElasticConfig>,
}

/// The transfer modes: which congestion controls the agent registers and how its estimates
/// drive them (`crate::transfer`).
#[derive(Debug, Clone, PartialEq)]
pub struct TransferConfig {
    pub modes: Vec<Mode>,
    /// The rules' parameters and the own-rate correction.
    pub feed: FeedConfig,
    /// Passive (Wren) estimates feed their flow's destination (see docs/transfer-modes.md for
    /// why this is off by default).
    pub passive: bool,
    /// At most this many destinations in the map: the configured ones count first, passive
    /// ones take what is left.
    pub max_destinations: usize,
    /// A peer's estimates also feed these destinations (e.g. hosts behind the same bottleneck).
    pub destinations: BTreeMap<IpAddr, Vec<IpAddr>>,
}

impl Default for TransferConfig {
    fn default() -> Self {
        TransferConfig {
            modes: Mode::ALL.to_vec(),
            feed: FeedConfig::default(),
            passive: false,
            max_destinations: 256,
            destinations: BTreeMap::new(),
        }
    }
}

/// Where estimates are kept.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreAt {
    /// One SQLite file.
    File(PathBuf),
    /// A PostgreSQL database (libpq-style URL or key=value string).
    Postgres(String),
}

/// Is `s` a PostgreSQL connection string rather than a file?
fn is_postgres(s: &str) -> bool {
    s.starts_with("postgresql://") || s.starts_with("postgres://") || s.contains("host=")
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServiceConfig {
    /// `None`: in memory.
    pub store: Option<StoreAt>,
    /// A central PostgreSQL archive every estimate is also pushed to.
    pub archive: Option<String>,
    pub retention: Duration,
    pub paths: Vec<PathSchedule>,
    /// Where the HTTP API listens; `None`: no API.
    pub http: Option<SocketAddr>,
    /// The API token for clients off localhost.
    pub token: Option<String>,
    pub passive: Vec<PassiveSource>,
    pub riders: Option<RidersConfig>,
    /// Inline measurement of opted-in TCP flows (`crate::inline`).
    pub inline: Option<crate::inline::InlineSettings>,
    pub transfer: Option<TransferConfig>,
    /// MPAT aggregates (`crate::mpat`).
    pub mpat: Option<crate::mpat::MpatConfig>,
    /// Netmapper on a schedule (`crate::netmap`).
    pub map: Option<crate::netmap::MapSchedule>,
}

impl Default for ServiceConfig {
    /// `mgrp agent` alone: answer probes, keep nothing on a schedule, store in memory for a day.
    fn default() -> Self {
        ServiceConfig {
            store: None,
            retention: Duration::from_secs(86_400),
            paths: Vec::new(),
            http: None,
            token: None,
            archive: None,
            passive: Vec::new(),
            riders: None,
            inline: None,
            transfer: None,
            mpat: None,
            map: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    peer: String,
    #[serde(default = "default_method")]
    method: String,
    every: Option<String>,
    budget: Option<String>,
    ceiling: Option<String>,
}

fn default_method() -> String {
    crate::track::METHOD.into()
}
fn default_every(method: &str) -> &'static str {
    if method == crate::track::METHOD {
        // The ceiling paces tracking; this is only the least time between its rounds. Phase
        // readings (on/off paths) are ~5 kB rounds: 250 ms between them left the 1 s mean
        // ~3 readings (fluid on/off, paced as here: p90 17–19%), 100 ms ~8 (7–12%).
        "100ms"
    } else {
        "60s"
    }
}

/// A share of capacity: `2%` or `0.02`, above 0 and at most 100%.
pub fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| {
        format!("{s:?} is not a share: use a percentage such as 2% or a fraction such as 0.02")
    })?;
    if !(v.is_finite() && v > 0.0 && v <= 1.0) {
        return Err(format!(
            "{s:?} must be above 0% and at most 100% of the capacity"
        ));
    }
    Ok(v)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPassive {
    iface: String,
    flow: Option<String>,
    window: Option<String>,
    peer: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRiders {
    #[serde(default)]
    opt_in: Vec<String>,
    dev: Option<String>,
    hold: Option<String>,
    ratio: Option<f64>,
    elastic: Option<bool>,
    elastic_share: Option<f64>,
    elastic_wait: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInline {
    #[serde(default)]
    opt_in: Vec<String>,
    dev: Option<String>,
    access: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransfer {
    modes: Option<Vec<String>>,
    g: Option<f64>,
    // Signed, so that a negative value gets our message rather than serde's.
    h: Option<i64>,
    max_age: Option<String>,
    threshold_pkts: Option<i64>,
    floor_pkts: Option<i64>,
    probe: Option<bool>,
    jump_start: Option<bool>,
    correct_own_rate: Option<bool>,
    passive: Option<bool>,
    max_destinations: Option<i64>,
    #[serde(default)]
    destinations: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    store: Option<String>,
    archive: Option<String>,
    retention: Option<String>,
    http: Option<String>,
    token_file: Option<String>,
    #[serde(default)]
    path: Vec<RawPath>,
    #[serde(default)]
    passive: Vec<RawPassive>,
    riders: Option<RawRiders>,
    inline: Option<RawInline>,
    transfer: Option<RawTransfer>,
    mpat: Option<crate::mpat::MpatConfig>,
    map: Option<crate::netmap::RawMap>,
}

/// A retention: a duration, or whole days (`7d`, up to ten years).
fn parse_retention(s: &str) -> Result<Duration, String> {
    match s.trim().strip_suffix('d') {
        Some(days) => days
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|d| (1..=3650).contains(d))
            .map(|d| Duration::from_secs(d * 86_400))
            .ok_or_else(|| format!("{s:?}: days must be a whole number 1..=3650")),
        None => parse_duration(s).map_err(|e| e.to_string()),
    }
}

/// The method a schedule names, spelled exactly: one that estimates available bandwidth
/// (capacity is measured by all of them).
pub fn scheduled_method(name: &str) -> Option<Method> {
    Method::AVAILABLE.into_iter().find(|m| m.name() == name)
}

impl ServiceConfig {
    pub fn load(path: &Path) -> Result<ServiceConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Bad {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Self::parse(&text).map_err(|Invalid(why)| ConfigError::Bad {
            path: path.display().to_string(),
            why,
        })
    }

    pub fn parse(text: &str) -> Result<ServiceConfig, Invalid> {
        Self::parse_text(text).map_err(Invalid)
    }

    fn parse_text(text: &str) -> Result<ServiceConfig, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut c = ServiceConfig::default();
        if let Some(s) = raw.store {
            c.store = match s.as_str() {
                ":memory:" => None,
                u if is_postgres(u) => Some(StoreAt::Postgres(s)),
                _ => Some(StoreAt::File(PathBuf::from(s))),
            };
        }
        if let Some(a) = raw.archive {
            if !is_postgres(&a) {
                return Err(format!(
                    "archive: {a:?} is not a PostgreSQL URL (postgresql://USER@HOST/DB)"
                ));
            }
            c.archive = Some(a);
        }
        if let Some(r) = raw.retention {
            c.retention = parse_retention(&r).map_err(|e| format!("retention: {e}"))?;
            if c.retention < Duration::from_secs(60) {
                return Err("retention must be at least 1m".into());
            }
        }
        // A configured agent serves its API on localhost unless told otherwise.
        c.http = match raw.http.as_deref() {
            Some("off") => None,
            Some(a) => Some(
                a.parse()
                    .map_err(|_| format!("http: {a:?} is not IP:PORT"))?,
            ),
            None => Some("127.0.0.1:7241".parse().expect("valid")),
        };
        if let Some(f) = raw.token_file {
            let t = std::fs::read_to_string(&f).map_err(|e| format!("token_file {f}: {e}"))?;
            let t = t.trim().to_string();
            if t.len() < 16 {
                return Err(format!(
                    "token_file {f}: a token needs at least 16 characters"
                ));
            }
            c.token = Some(t);
        }
        if raw.path.len() > 1024 {
            return Err("at most 1024 [[path]] entries".into());
        }
        for (i, p) in raw.path.into_iter().enumerate() {
            let at = |why: String| format!("path #{} ({}): {why}", i + 1, p.peer);
            let peer = mgrp_engine::api::parse_peer(&p.peer).map_err(|e| at(e.to_string()))?;
            let known = p.method == crate::loss::METHOD || p.method == crate::track::METHOD;
            if !known && scheduled_method(&p.method).is_none() {
                let mut names = vec![crate::track::METHOD];
                names.extend(Method::AVAILABLE.iter().map(|m| m.name()));
                names.push(crate::loss::METHOD);
                return Err(at(format!(
                    "unknown method {:?}: use {}",
                    p.method,
                    names.join(", ")
                )));
            }
            let every = p.every.as_deref().unwrap_or(default_every(&p.method));
            let every = parse_duration(every).map_err(|e| at(format!("every: {e}")))?;
            let ceiling = match &p.ceiling {
                Some(c) => Some(parse_share(c).map_err(|e| at(format!("ceiling: {e}")))?),
                None => (p.method == crate::track::METHOD).then_some(DEFAULT_CEILING),
            };
            if every < Duration::from_millis(100) || every > Duration::from_secs(86_400) {
                return Err(at("every must be 100ms..=1d".into()));
            }
            let budget = match &p.budget {
                None => None,
                Some(b) => {
                    let b = parse_bytes(b).map_err(|e| at(format!("budget: {e}")))?;
                    if b < 10_000 {
                        return Err(at(
                            "budget below 10 kB per minute leaves nothing to measure with".into(),
                        ));
                    }
                    Some(b)
                }
            };
            // `IP` and `IP:7240` are one peer: parse_peer adds the default port, so equal
            // addresses are the same agent, measured twice for nothing.
            if let Some(j) = c.paths.iter().position(|q| q.peer == peer) {
                return Err(at(format!(
                    "peer {peer} is already scheduled by path #{} (one schedule per peer)",
                    j + 1
                )));
            }
            c.paths.push(PathSchedule {
                peer,
                method: p.method,
                every,
                budget,
                ceiling,
            });
        }
        if let Some(r) = raw.riders {
            let at = |why: String| format!("riders: {why}");
            let opt_in =
                opt_in_rules(&r.opt_in, "to:PREFIX, tcp:PORT, udp:PORT, mark:N").map_err(at)?;
            let hold = parse_duration(r.hold.as_deref().unwrap_or("10ms"))
                .map_err(|e| at(format!("hold: {e}")))?;
            if hold > Duration::from_secs(1) {
                return Err(at("hold above 1s would stall TCP".into()));
            }
            let ratio = r.ratio.unwrap_or(1.0);
            if !(0.0..=1.0).contains(&ratio) {
                return Err(at("ratio must be 0..=1".into()));
            }
            let dev = r.dev.unwrap_or_else(|| "mgrp0".into());
            if dev.is_empty() || dev.len() > 15 {
                return Err(at("dev must be an interface name (1..=15 bytes)".into()));
            }
            let elastic = match r.elastic {
                Some(true) => {
                    let d = mgrp_engine::riders::ElasticConfig::default();
                    let wait = match &r.elastic_wait {
                        Some(w) => parse_duration(w)
                            .map_err(|e| at(format!("elastic_wait: {e}")))?
                            .as_nanos() as u64,
                        None => d.max_wait_ns,
                    };
                    let e = mgrp_engine::riders::ElasticConfig {
                        max_wait_ns: wait,
                        min_share: r.elastic_share.unwrap_or(d.min_share),
                    };
                    // The engine never waits past a held packet's deadline less 1 ms anyway.
                    e.validate().map_err(at)?;
                    Some(e)
                }
                _ if r.elastic_share.is_some() || r.elastic_wait.is_some() => {
                    return Err(at(
                        "elastic_share and elastic_wait need elastic = true".into()
                    ));
                }
                _ => None,
            };
            c.riders = Some(RidersConfig {
                dev,
                opt_in,
                hold,
                ratio,
                elastic,
            });
        }
        if let Some(r) = raw.inline {
            let at = |why: String| format!("inline: {why}");
            let opt_in = opt_in_rules(&r.opt_in, "to:PREFIX, tcp:PORT, mark:N").map_err(at)?;
            if let Some(o) = opt_in
                .iter()
                .find(|o| matches!(o, mgrp_shim::route::OptIn::UdpPort(_)))
            {
                return Err(at(format!("{o:?}: inline measurement works on TCP only")));
            }
            if let Some(rd) = &c.riders {
                if let Some(o) = opt_in.iter().find(|o| rd.opt_in.contains(o)) {
                    return Err(at(format!(
                        "{o:?} is opted into riders too: a flow rides or is measured inline"
                    )));
                }
            }
            let access_bps = match r.access.as_deref() {
                None => 1e9,
                Some(a) => mgrp_traffic::units::parse_rate(a)
                    .map_err(|e| at(format!("access: {e}")))? as f64,
            };
            if access_bps < 1e5 {
                return Err(at("access below 100 kbit/s".into()));
            }
            let dev = r.dev.unwrap_or_else(|| "mgrp2".into());
            if dev.is_empty() || dev.len() > 15 {
                return Err(at("dev must be an interface name (1..=15 bytes)".into()));
            }
            c.inline = Some(crate::inline::InlineSettings {
                dev,
                opt_in,
                access_bps,
            });
        }
        if raw.passive.len() > 64 {
            return Err("at most 64 [[passive]] entries".into());
        }
        for (i, p) in raw.passive.into_iter().enumerate() {
            let at = |why: String| format!("passive #{} ({}): {why}", i + 1, p.iface);
            if p.iface.is_empty() || p.iface.len() > 15 {
                return Err(at("iface must be an interface name (1..=15 bytes)".into()));
            }
            let window = parse_duration(p.window.as_deref().unwrap_or("1s"))
                .map_err(|e| at(format!("window: {e}")))?;
            if window < Duration::from_millis(100) || window > Duration::from_secs(3600) {
                return Err(at("window must be 100ms..=1h".into()));
            }
            let peer = match p.peer.as_deref() {
                None => None,
                Some(a) => Some(
                    a.parse::<SocketAddr>()
                        .map_err(|_| at(format!("peer {a:?}: use the agent's ADDRESS:PORT")))?,
                ),
            };
            c.passive.push(PassiveSource {
                iface: p.iface,
                flow: p.flow.filter(|f| !f.trim().is_empty()),
                window,
                peer,
            });
        }
        if let Some(t) = raw.transfer {
            let peers: Vec<IpAddr> = c.paths.iter().map(|p| p.peer.ip()).collect();
            c.transfer = Some(parse_transfer(t, &peers).map_err(|e| format!("transfer: {e}"))?);
        }
        if let Some(m) = raw.mpat {
            crate::mpat::check_config(&m).map_err(|e| format!("mpat: {e}"))?;
            c.mpat = Some(m);
        }
        if let Some(m) = raw.map {
            c.map = Some(crate::netmap::parse(m).map_err(|e| format!("map: {e}"))?);
        }
        Ok(c)
    }
}

/// Most destinations one peer's estimates may feed besides the peer itself.
const MAX_MAPPED: usize = 64;
/// The programs' map holds 4096 destinations.
const MAP_ENTRIES: i64 = 4096;
/// Window sizes beyond this many packets are not a meaningful threshold or floor.
const MAX_PKTS: i64 = 1_000_000;

fn parse_modes(names: Option<Vec<String>>) -> Result<Vec<Mode>, String> {
    let Some(names) = names else {
        return Ok(Mode::ALL.to_vec());
    };
    if names.is_empty() {
        return Err(
            "modes needs at least one of background, full-speed, ledbat (or leave out [transfer])"
                .into(),
        );
    }
    let mut modes = Vec::new();
    for n in &names {
        let m = Mode::parse(n).map_err(|e| format!("modes: {e}"))?;
        if modes.contains(&m) {
            return Err(format!("modes: {m} is named twice"));
        }
        modes.push(m);
    }
    Ok(modes)
}

fn pkts(name: &str, v: Option<i64>, default: u32) -> Result<u32, String> {
    match v {
        None => Ok(default),
        Some(x) if (0..=MAX_PKTS).contains(&x) => Ok(x as u32),
        Some(x) => Err(format!("{name} must be 0..={MAX_PKTS} packets, got {x}")),
    }
}

fn parse_params(t: &RawTransfer) -> Result<PathParams, String> {
    let d = PathParams::default();
    let g = t.g.unwrap_or(d.g);
    if !(g > 0.0 && g <= 1.0) {
        return Err(format!("g must be in (0, 1], got {g}"));
    }
    let h = match t.h {
        None => d.h,
        Some(h) if (1..=10_000).contains(&h) => h as u32,
        Some(h) => return Err(format!("h must be 1..=10000, got {h}")),
    };
    let max_age = match &t.max_age {
        None => d.max_age,
        Some(a) => parse_duration(a).map_err(|e| format!("max_age: {e}"))?,
    };
    if max_age < Duration::from_millis(100) || max_age > Duration::from_secs(86_400) {
        return Err(format!("max_age must be 100ms..=1d, got {max_age:?}"));
    }
    let p = PathParams {
        g,
        h,
        max_age,
        threshold_pkts: pkts("threshold_pkts", t.threshold_pkts, d.threshold_pkts)?,
        floor_pkts: pkts("floor_pkts", t.floor_pkts, d.floor_pkts)?,
        probe: t.probe.unwrap_or(d.probe),
        jump_start: t.jump_start.unwrap_or(d.jump_start),
    };
    p.validate()?;
    Ok(p)
}

fn ip(s: &str, what: &str) -> Result<IpAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{what} {s:?} is not an IP address"))
}

/// `destinations`: each key a peer whose estimates feed its values too.
fn parse_destinations(
    raw: &BTreeMap<String, Vec<String>>,
    peers: &[IpAddr],
    passive: bool,
) -> Result<BTreeMap<IpAddr, Vec<IpAddr>>, String> {
    let mut out = BTreeMap::new();
    for (k, vs) in raw {
        let from = ip(k, "destinations: key")?;
        if !passive && !peers.contains(&from) {
            return Err(format!(
                "destinations: {from} is not a scheduled peer ([[path]]), so no estimate of it would feed {vs:?} (schedule it, or set passive = true)"
            ));
        }
        if vs.is_empty() || vs.len() > MAX_MAPPED {
            return Err(format!(
                "destinations: {from} needs 1..={MAX_MAPPED} addresses"
            ));
        }
        let mut to = Vec::new();
        for v in vs {
            let d = ip(v, &format!("destinations: {from} ->"))?;
            if d != from && !to.contains(&d) {
                to.push(d);
            }
        }
        if out.insert(from, to).is_some() {
            return Err(format!("destinations: {from} is given twice"));
        }
    }
    Ok(out)
}

fn parse_transfer(t: RawTransfer, peers: &[IpAddr]) -> Result<TransferConfig, String> {
    let params = parse_params(&t)?;
    let passive = t.passive.unwrap_or(false);
    let max_destinations = match t.max_destinations {
        None => 256,
        Some(n) if (1..=MAP_ENTRIES).contains(&n) => n as usize,
        Some(n) => {
            return Err(format!(
                "max_destinations must be 1..={MAP_ENTRIES}, got {n}"
            ))
        }
    };
    let destinations = parse_destinations(&t.destinations, peers, passive)?;
    let cfg = TransferConfig {
        modes: parse_modes(t.modes)?,
        feed: FeedConfig {
            params,
            correct_own_rate: t.correct_own_rate.unwrap_or(true),
        },
        passive,
        max_destinations,
        destinations,
    };
    let n = cfg.configured_destinations(peers).len();
    if n > cfg.max_destinations {
        return Err(format!(
            "{n} destinations are configured (scheduled peers and `destinations`), more than max_destinations = {}",
            cfg.max_destinations
        ));
    }
    Ok(cfg)
}

impl TransferConfig {
    /// Every destination fed by configuration: each scheduled peer, and what `destinations`
    /// maps peers to; sorted, once each.
    pub fn configured_destinations(&self, peers: &[IpAddr]) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = peers.to_vec();
        for to in self.destinations.values() {
            v.extend(to.iter().copied());
        }
        v.sort();
        v.dedup();
        v
    }
}

/// An opt-in list (riders, inline): 1..=64 rules, each parsed as the shim reads it.
fn opt_in_rules(list: &[String], kinds: &str) -> Result<Vec<mgrp_shim::route::OptIn>, String> {
    if list.is_empty() || list.len() > 64 {
        return Err(format!("opt_in needs 1..=64 entries ({kinds})"));
    }
    list.iter()
        .map(|o| mgrp_shim::route::OptIn::parse(o).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_empty_configs() {
        let c = ServiceConfig::parse(
            r#"
            store = "/tmp/x.db"
            retention = "30d"
            [[path]]
            peer = "198.18.3.2"
            every = "5s"
            budget = "500kb"
            [[path]]
            peer = "10.0.0.1:9000"
            method = "chirp"
            [[passive]]
            iface = "eth0"
            flow = "port 443"
            "#,
        )
        .unwrap();
        assert_eq!(c.store, Some(StoreAt::File(PathBuf::from("/tmp/x.db"))));
        let pg = ServiceConfig::parse(
            "store = \"postgresql://mgrp@db/mgrp\"\narchive = \"host=/run/pg dbname=a\"",
        )
        .unwrap();
        assert_eq!(
            pg.store,
            Some(StoreAt::Postgres("postgresql://mgrp@db/mgrp".into()))
        );
        assert_eq!(pg.archive.as_deref(), Some("host=/run/pg dbname=a"));
        assert_eq!(c.retention, Duration::from_secs(30 * 86_400));
        assert_eq!(
            ServiceConfig::parse("retention = \"2h\"")
                .unwrap()
                .retention,
            Duration::from_secs(7200)
        );
        assert_eq!(c.paths.len(), 2);
        assert_eq!(c.paths[0].peer, "198.18.3.2:7240".parse().unwrap());
        assert_eq!(
            (c.paths[0].every, c.paths[0].budget),
            (Duration::from_secs(5), Some(512_000))
        );
        assert_eq!(c.paths[1].budget, None, "the default is derived");
        assert_eq!(c.paths[1].method, "chirp");
        assert_eq!(c.paths[1].every, Duration::from_secs(60));
        // Tracking is the default method, with its 2% ceiling; other methods have none unless
        // configured.
        assert_eq!(
            (c.paths[0].method.as_str(), c.paths[0].ceiling),
            ("track", Some(0.02))
        );
        assert_eq!(c.paths[1].ceiling, None);
        let t = ServiceConfig::parse(
            "[[path]]\npeer = \"1.2.3.4\"\n[[path]]\npeer = \"1.2.3.5\"\nmethod = \"auto\"\nceiling = \"0.5%\"",
        )
        .unwrap();
        assert_eq!(t.paths[0].every, Duration::from_millis(100));
        assert_eq!(t.paths[1].ceiling, Some(0.005));
        assert_eq!(parse_share("0.02"), Ok(0.02));
        assert_eq!(parse_share(" 100% "), Ok(1.0));
        assert_eq!(
            c.passive,
            vec![PassiveSource {
                iface: "eth0".into(),
                flow: Some("port 443".into()),
                window: Duration::from_secs(1),
                peer: None,
            }]
        );
        let empty = ServiceConfig::parse("").unwrap();
        assert_eq!(empty.http, Some("127.0.0.1:7241".parse().unwrap()));
        assert!(empty.paths.is_empty() && empty.store.is_none());
        assert_eq!(ServiceConfig::parse("http = \"off\"").unwrap().http, None);
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        for (text, why) in [
            ("[[path]]\npeer = \"nowhere\"", "path #1"),
            (
                "[[path]]\npeer = \"1.2.3.4\"\nmethod = \"magic\"",
                "unknown method",
            ),
            ("[[path]]\npeer = \"1.2.3.4\"\nevery = \"1us\"", "every"),
            ("[[path]]\npeer = \"1.2.3.4\"\nbudget = \"1b\"", "budget"),
            ("[[path]]\npeer = \"1.2.3.4\"\nceiling = \"0%\"", "ceiling"),
            ("[[path]]\npeer = \"1.2.3.4\"\nceiling = \"-1%\"", "above 0%"),
            ("[[path]]\npeer = \"1.2.3.4\"\nceiling = \"150%\"", "at most 100%"),
            ("[[path]]\npeer = \"1.2.3.4\"\nceiling = \"lots\"", "not a share"),
            ("retention = \"1s\"", "retention"),
            ("retention = \"0d\"", "retention"),
            ("retention = \"1.5d\"", "retention"),
            ("colour = \"blue\"", "unknown field"),
            ("[[path]\npeer = 1", "expected"),
            ("http = \"everywhere\"", "IP:PORT"),
            ("token_file = \"/nonexistent/token\"", "token_file"),
            ("[[passive]]\niface = \"\"", "passive #1"),
            ("archive = \"/tmp/x.db\"", "not a PostgreSQL URL"),
            ("[riders]\nopt_in = []", "riders: opt_in"),
            ("[riders]\nopt_in = [\"dns:53\"]", "unknown opt-in"),
            ("[riders]\nopt_in = [\"tcp:80\"]\nratio = 2.0", "ratio"),
            ("[riders]\nopt_in = [\"tcp:80\"]\nhold = \"5s\"", "hold"),
            (
                "[riders]\nopt_in = [\"tcp:80\"]\nelastic = true\nelastic_share = 0",
                "min_share",
            ),
            (
                "[riders]\nopt_in = [\"tcp:80\"]\nelastic = true\nelastic_wait = \"2s\"",
                "elastic",
            ),
            (
                "[riders]\nopt_in = [\"tcp:80\"]\nelastic_share = 0.5",
                "need elastic = true",
            ),
            ("[inline]\nopt_in = []", "inline: opt_in"),
            ("[inline]\nopt_in = [\"udp:53\"]", "TCP only"),
            (
                "[riders]\nopt_in = [\"tcp:80\"]\n[inline]\nopt_in = [\"tcp:80\"]",
                "opted into riders too",
            ),
            ("[inline]\nopt_in = [\"tcp:80\"]\naccess = \"fast\"", "inline: access"),
            ("[[passive]]\niface = \"eth0\"\nwindow = \"1ms\"", "window"),
            (
                "[[path]]\npeer = \"198.18.3.2\"\n[[path]]\npeer = \"198.18.3.2:7240\"",
                "path #2 (198.18.3.2:7240): peer 198.18.3.2:7240 is already scheduled by path #1",
            ),
            (
                "[[path]]\npeer = \"10.0.0.1:9000\"\nmethod = \"chirp\"\n[[path]]\npeer = \"10.0.0.1:9000\"",
                "one schedule per peer",
            ),
        ] {
            let e = ServiceConfig::parse(text).unwrap_err();
            assert!(e.0.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn transfer_defaults_and_every_setting() {
        let c = ServiceConfig::parse("[transfer]").unwrap();
        let t = c.transfer.unwrap();
        assert_eq!(t, TransferConfig::default());
        assert_eq!(t.modes, Mode::ALL.to_vec());
        assert_eq!(t.feed.params, PathParams::default());
        assert!(t.feed.correct_own_rate && !t.passive);
        assert!(ServiceConfig::parse("").unwrap().transfer.is_none());

        let c = ServiceConfig::parse(
            r#"
            [[path]]
            peer = "198.18.3.2"
            [transfer]
            modes = ["bg", "full-speed"]
            g = 0.8
            h = 50
            max_age = "30s"
            threshold_pkts = 25
            floor_pkts = 0
            probe = false
            jump_start = false
            correct_own_rate = false
            passive = true
            max_destinations = 8
            destinations = { "198.18.3.2" = ["198.18.3.9", "198.18.3.10", "198.18.3.9"] }
            "#,
        )
        .unwrap();
        let t = c.transfer.unwrap();
        assert_eq!(t.modes, vec![Mode::Background, Mode::FullSpeed]);
        assert_eq!(
            t.feed.params,
            PathParams {
                g: 0.8,
                h: 50,
                max_age: Duration::from_secs(30),
                threshold_pkts: 25,
                floor_pkts: 0,
                probe: false,
                jump_start: false,
            }
        );
        assert!(!t.feed.correct_own_rate && t.passive);
        assert_eq!(t.max_destinations, 8);
        let peer: IpAddr = "198.18.3.2".parse().unwrap();
        // Repeats are dropped; the peer itself is fed as a scheduled peer.
        assert_eq!(
            t.destinations[&peer],
            vec![
                "198.18.3.9".parse::<IpAddr>().unwrap(),
                "198.18.3.10".parse().unwrap()
            ]
        );
        assert_eq!(t.configured_destinations(&[peer]).len(), 3);
    }

    #[test]
    fn bad_transfer_settings_say_what_is_wrong() {
        for (text, why) in [
            ("[transfer]\nmodes = []", "transfer: modes needs at least one"),
            ("[transfer]\nmodes = [\"turbo\"]", "unknown transfer mode \"turbo\""),
            ("[transfer]\nmodes = [\"bg\", \"background\"]", "background is named twice"),
            ("[transfer]\ng = 0", "g must be in (0, 1], got 0"),
            ("[transfer]\ng = 1.5", "g must be in (0, 1]"),
            ("[transfer]\nh = 0", "h must be 1..=10000, got 0"),
            ("[transfer]\nh = -3", "h must be 1..=10000, got -3"),
            ("[transfer]\nmax_age = \"1ms\"", "max_age must be 100ms..=1d"),
            ("[transfer]\nmax_age = \"soon\"", "transfer: max_age"),
            ("[transfer]\nfloor_pkts = -1", "floor_pkts must be 0..="),
            ("[transfer]\nthreshold_pkts = 99999999", "threshold_pkts must be 0..="),
            ("[transfer]\nmax_destinations = 0", "max_destinations must be 1..=4096"),
            ("[transfer]\nspeed = 3", "unknown field `speed`"),
            (
                "[transfer]\ndestinations = { \"10.0.0.1\" = [\"10.0.0.2\"] }",
                "10.0.0.1 is not a scheduled peer",
            ),
            (
                "[transfer]\npassive = true\ndestinations = { \"nowhere\" = [\"10.0.0.2\"] }",
                "key \"nowhere\" is not an IP address",
            ),
            (
                "[[path]]\npeer = \"10.0.0.1\"\n[transfer]\ndestinations = { \"10.0.0.1\" = [\"x\"] }",
                "10.0.0.1 -> \"x\" is not an IP address",
            ),
            (
                "[[path]]\npeer = \"10.0.0.1\"\n[transfer]\ndestinations = { \"10.0.0.1\" = [] }",
                "needs 1..=64 addresses",
            ),
            (
                "[[path]]\npeer = \"10.0.0.1\"\n[[path]]\npeer = \"10.0.0.2\"\n[transfer]\nmax_destinations = 1",
                "2 destinations are configured",
            ),
        ] {
            let e = ServiceConfig::parse(text).unwrap_err();
            assert!(e.0.contains(why), "{text:?}: {e}");
        }
    }
}

#[cfg(test)]
mod inline_tests {
    use super::*;

    #[test]
    fn riders_elastic_is_off_unless_asked() {
        let c = ServiceConfig::parse("[riders]\nopt_in = [\"tcp:80\"]").unwrap();
        assert_eq!(c.riders.unwrap().elastic, None);
        let c = ServiceConfig::parse("[riders]\nopt_in = [\"tcp:80\"]\nelastic = true").unwrap();
        assert_eq!(
            c.riders.unwrap().elastic,
            Some(mgrp_engine::riders::ElasticConfig::default())
        );
        let c = ServiceConfig::parse(
            "[riders]\nopt_in = [\"tcp:80\"]\nelastic = true\nelastic_share = 0.5\nelastic_wait = \"5ms\"",
        )
        .unwrap();
        let e = c.riders.unwrap().elastic.unwrap();
        assert_eq!((e.min_share, e.max_wait_ns), (0.5, 5_000_000));
    }

    #[test]
    fn inline_section() {
        let c = ServiceConfig::parse(
            "[inline]\nopt_in = [\"tcp:5001\", \"to:10.0.0.0/8\"]\naccess = \"100mbit\"",
        )
        .unwrap();
        let i = c.inline.unwrap();
        assert_eq!(i.dev, "mgrp2");
        assert_eq!(i.access_bps, 100e6);
        assert_eq!(i.opt_in.len(), 2);
        assert!(ServiceConfig::parse("").unwrap().inline.is_none());
    }
}

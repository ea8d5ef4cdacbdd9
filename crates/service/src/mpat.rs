//! MPAT aggregates in the agent (`[mpat]`, `/v1/mpat`): named aggregates of member rules
//! (destination and/or remote port, weight) kept in the kernel's `mgrp_mpat` maps, weights
//! changed live, per-rule and per-aggregate rates from the maps' counters.
//!
//! [`Book`] is sans-IO: it checks requests (names, weights, a rule in two aggregates, the
//! shared-bottleneck warning), drives an [`MpatKernel`] and turns counter readings taken at an
//! explicit `now` into rates. The kernel side is `mgrp_control::MpatControls`; tests use a
//! double. Sockets join by running on `mgrp_mpat` (`mgrp mpat run -- CMD`, the
//! cgroup sockops program of the transfer modes): a socket that matches a rule joins its
//! aggregate, one that matches none runs Reno.

use mgrp_control::mpat_kernel::{MAX_WEIGHT, MAX_WINDOWS};
use mgrp_control::{AggregateStats, MemberRule, MemberStats, MpatControls};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Aggregates the agent keeps (the kernel has 64 slots).
pub const MAX_AGGREGATES: usize = 64;
/// Member rules per aggregate (the kernel has 16 windows; more rules than windows is allowed
/// but pointless, so refuse it).
pub const MAX_MEMBERS: usize = MAX_WINDOWS;
/// Rates are deltas over at least this long (shorter reads reuse the last sample pair).
const MIN_SAMPLE_NS: u64 = 250_000_000;
/// Destinations whose capacities or RTTs differ by more than this are not one bottleneck.
const PATH_DIFF: f64 = 0.2;

/// `[mpat]`: aggregates created at start (more can be made over the API).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MpatConfig {
    #[serde(default, rename = "aggregate")]
    pub aggregates: Vec<AggregateSpec>,
}

/// An aggregate to create: its name and members.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSpec {
    pub name: String,
    pub members: Vec<MemberSpec>,
}

/// A member rule and its weight. Weight is a number so that 0, negatives and fractions get our
/// message rather than serde's.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MemberSpec {
    pub dst: Option<IpAddr>,
    pub port: Option<u16>,
    pub weight: f64,
}

impl MemberSpec {
    fn rule(&self) -> MemberRule {
        MemberRule {
            dst: self.dst,
            port: self.port,
        }
    }
}

/// What the kernel side must do (`MpatControls`, or a test double).
pub trait MpatKernel: Send {
    fn create_aggregate(&self) -> Result<u32, mgrp_control::Error>;
    fn remove_aggregate(&self, id: u32) -> Result<(), mgrp_control::Error>;
    fn add_member(
        &self,
        agg: u32,
        rule: MemberRule,
        weight: u32,
    ) -> Result<(), mgrp_control::Error>;
    fn set_weight(&self, rule: MemberRule, weight: u32) -> Result<(), mgrp_control::Error>;
    fn aggregate_stats(&self, id: u32) -> Result<AggregateStats, mgrp_control::Error>;
    fn member_stats(&self) -> Result<Vec<MemberStats>, mgrp_control::Error>;
}

impl MpatKernel for MpatControls {
    fn create_aggregate(&self) -> Result<u32, mgrp_control::Error> {
        MpatControls::create_aggregate(self)
    }
    fn remove_aggregate(&self, id: u32) -> Result<(), mgrp_control::Error> {
        MpatControls::remove_aggregate(self, id)
    }
    fn add_member(
        &self,
        agg: u32,
        rule: MemberRule,
        weight: u32,
    ) -> Result<(), mgrp_control::Error> {
        MpatControls::add_member(self, agg, rule, weight)
    }
    fn set_weight(&self, rule: MemberRule, weight: u32) -> Result<(), mgrp_control::Error> {
        MpatControls::set_weight(self, rule, weight)
    }
    fn aggregate_stats(&self, id: u32) -> Result<AggregateStats, mgrp_control::Error> {
        MpatControls::aggregate_stats(self, id)
    }
    fn member_stats(&self) -> Result<Vec<MemberStats>, mgrp_control::Error> {
        MpatControls::member_stats(self)
    }
}

/// Why a request was refused; the HTTP layer maps the kind to a status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MpatError {
    #[error("{0}")]
    BadInput(String),
    #[error("no aggregate {0:?}")]
    Unknown(String),
    #[error("{0}")]
    Conflict(String),
    #[error("MPAT unavailable: {0}")]
    Unavailable(String),
    #[error("kernel: {0}")]
    Kernel(String),
}

fn kernel(e: mgrp_control::Error) -> MpatError {
    match e {
        mgrp_control::Error::BadInput(s) => MpatError::BadInput(s),
        e => MpatError::Kernel(e.to_string()),
    }
}

/// What mgrp's estimates say about the path to a destination (the shared-bottleneck check).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathInfo {
    pub path: String,
    pub capacity_bps: Option<f64>,
    pub rtt_s: Option<f64>,
}

/// One member rule as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberView {
    pub dst: Option<IpAddr>,
    pub port: Option<u16>,
    pub weight: u32,
    /// The weight's share of the aggregate's Σ weights (of its rules).
    pub share: f64,
    /// Sockets that matched the rule so far.
    pub flows: u64,
    pub acked_bytes: u64,
    /// Acked bytes per second over the last sample interval, bit/s.
    pub rate_bps: Option<f64>,
}

/// One aggregate as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AggregateView {
    pub name: String,
    pub id: u32,
    pub members: Vec<MemberView>,
    pub rate_bps: Option<f64>,
    pub kernel: Option<AggregateStats>,
    /// MPAT assumes one bottleneck: why that may not hold here.
    pub warnings: Vec<String>,
}

/// `GET /v1/mpat`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MpatView {
    pub configured: bool,
    pub available: bool,
    pub unavailable_reason: Option<String>,
    pub aggregates: Vec<AggregateView>,
}

impl MpatView {
    pub fn not_configured() -> MpatView {
        MpatView {
            configured: false,
            available: false,
            unavailable_reason: None,
            aggregates: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
struct Agg {
    id: u32,
    members: Vec<(MemberRule, u32)>,
    warnings: Vec<String>,
}

/// Counters of one rule at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    t_ns: u64,
    acked_bytes: u64,
}

/// Per rule (destination, port): its last two samples (older, newer).
type SampleMap = BTreeMap<(Option<IpAddr>, Option<u16>), (Option<Sample>, Sample)>;

/// The agent's aggregates over a kernel: sans-IO apart from the kernel calls.
pub struct Book {
    kernel: Box<dyn MpatKernel>,
    aggs: BTreeMap<String, Agg>,
    samples: SampleMap,
}

fn check_name(name: &str) -> Result<(), MpatError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(MpatError::BadInput(format!(
            "aggregate name {name:?}: 1..=32 of A-Z a-z 0-9 _ - ."
        )))
    }
}

fn check_weight(m: &MemberSpec) -> Result<u32, MpatError> {
    let w = m.weight;
    if !(w.is_finite() && w >= 1.0 && w <= f64::from(MAX_WEIGHT) && w.fract() == 0.0) {
        return Err(MpatError::BadInput(format!(
            "weight of {}: must be a whole number 1..={MAX_WEIGHT}, got {w}",
            describe(m.rule())
        )));
    }
    Ok(w as u32)
}

fn describe(r: MemberRule) -> String {
    match (r.dst, r.port) {
        (Some(d), Some(p)) => format!("{d} port {p}"),
        (Some(d), None) => format!("{d}"),
        (None, Some(p)) => format!("port {p}"),
        (None, None) => "(any)".into(),
    }
}

fn differ(a: f64, b: f64) -> bool {
    (a - b).abs() > PATH_DIFF * a.max(b)
}

/// MPAT assumes its members share one bottleneck. mgrp can only check destinations: members
/// to one destination share its path; several destinations are plausible only when their
/// estimated capacities and RTTs agree, and are flagged when they differ or are unknown.
pub fn bottleneck_warnings(
    members: &[MemberSpec],
    paths: &BTreeMap<IpAddr, PathInfo>,
) -> Vec<String> {
    let mut w = Vec::new();
    let mut dsts: Vec<IpAddr> = members.iter().filter_map(|m| m.dst).collect();
    dsts.sort();
    dsts.dedup();
    for m in members.iter().filter(|m| m.dst.is_none()) {
        w.push(format!(
            "{} names no destination: its flows may go anywhere, so one shared bottleneck cannot be checked",
            describe(m.rule())
        ));
    }
    if dsts.len() < 2 {
        return w;
    }
    let first = dsts[0];
    for &d in &dsts[1..] {
        let (Some(a), Some(b)) = (paths.get(&first), paths.get(&d)) else {
            w.push(format!(
                "spans {first} and {d}, and mgrp has no estimates of {}: one shared bottleneck is assumed, not checked",
                if paths.contains_key(&first) { d } else { first }
            ));
            continue;
        };
        let mut why = Vec::new();
        if let (Some(x), Some(y)) = (a.capacity_bps, b.capacity_bps) {
            if differ(x, y) {
                why.push(format!("capacity {:.1} vs {:.1} Mbit/s", x / 1e6, y / 1e6));
            }
        }
        if let (Some(x), Some(y)) = (a.rtt_s, b.rtt_s) {
            if differ(x, y) {
                why.push(format!("RTT {:.1} vs {:.1} ms", x * 1e3, y * 1e3));
            }
        }
        if !why.is_empty() {
            w.push(format!(
                "spans {first} and {d} whose paths differ ({}): MPAT assumes one shared bottleneck",
                why.join(", ")
            ));
        } else if a.capacity_bps.is_none() && a.rtt_s.is_none()
            || b.capacity_bps.is_none() && b.rtt_s.is_none()
        {
            w.push(format!(
                "spans {first} and {d} without capacity or RTT estimates: one shared bottleneck is assumed, not checked"
            ));
        }
    }
    w
}

impl Book {
    pub fn new(kernel: Box<dyn MpatKernel>) -> Book {
        Book {
            kernel,
            aggs: BTreeMap::new(),
            samples: BTreeMap::new(),
        }
    }

    fn owner(&self, rule: MemberRule) -> Option<&str> {
        self.aggs
            .iter()
            .find(|(_, a)| a.members.iter().any(|(r, _)| *r == rule))
            .map(|(n, _)| n.as_str())
    }

    /// Create an aggregate; returns the shared-bottleneck warnings. All or nothing: a kernel
    /// refusal midway removes what was made.
    pub fn create(
        &mut self,
        spec: &AggregateSpec,
        paths: &BTreeMap<IpAddr, PathInfo>,
    ) -> Result<Vec<String>, MpatError> {
        check_name(&spec.name)?;
        if self.aggs.contains_key(&spec.name) {
            return Err(MpatError::Conflict(format!(
                "aggregate {:?} exists: change its weights, or delete it first",
                spec.name
            )));
        }
        if self.aggs.len() >= MAX_AGGREGATES {
            return Err(MpatError::Conflict(format!(
                "all {MAX_AGGREGATES} aggregates are in use"
            )));
        }
        if spec.members.is_empty() || spec.members.len() > MAX_MEMBERS {
            return Err(MpatError::BadInput(format!(
                "an aggregate needs 1..={MAX_MEMBERS} members, got {}",
                spec.members.len()
            )));
        }
        let mut members = Vec::new();
        for m in &spec.members {
            let rule = m.rule();
            if rule.dst.is_none() && rule.port.is_none() {
                return Err(MpatError::BadInput(
                    "a member needs a destination (dst) or a port".into(),
                ));
            }
            let w = check_weight(m)?;
            if members.iter().any(|(r, _)| *r == rule) {
                return Err(MpatError::BadInput(format!(
                    "{} is named twice",
                    describe(rule)
                )));
            }
            if let Some(o) = self.owner(rule) {
                return Err(MpatError::Conflict(format!(
                    "{} is already in aggregate {o:?}: a flow belongs to one aggregate",
                    describe(rule)
                )));
            }
            members.push((rule, w));
        }
        let id = self.kernel.create_aggregate().map_err(kernel)?;
        for &(rule, w) in &members {
            if let Err(e) = self.kernel.add_member(id, rule, w) {
                // Best effort: the aggregate goes with the rules made so far.
                let _ = self.kernel.remove_aggregate(id);
                return Err(kernel(e));
            }
        }
        let warnings = bottleneck_warnings(&spec.members, paths);
        self.aggs.insert(
            spec.name.clone(),
            Agg {
                id,
                members,
                warnings: warnings.clone(),
            },
        );
        Ok(warnings)
    }

    /// Change weights of existing members (all checked before any is written).
    pub fn reweight(&mut self, name: &str, members: &[MemberSpec]) -> Result<(), MpatError> {
        let agg = self
            .aggs
            .get(name)
            .ok_or_else(|| MpatError::Unknown(name.into()))?;
        if members.is_empty() {
            return Err(MpatError::BadInput("no members to reweight".into()));
        }
        let mut writes = Vec::new();
        for m in members {
            let w = check_weight(m)?;
            let rule = m.rule();
            if !agg.members.iter().any(|(r, _)| *r == rule) {
                return Err(MpatError::BadInput(format!(
                    "{} is not a member of {name:?}",
                    describe(rule)
                )));
            }
            writes.push((rule, w));
        }
        for &(rule, w) in &writes {
            self.kernel.set_weight(rule, w).map_err(kernel)?;
        }
        if let Some(agg) = self.aggs.get_mut(name) {
            for (rule, w) in writes {
                if let Some(m) = agg.members.iter_mut().find(|(r, _)| *r == rule) {
                    m.1 = w;
                }
            }
        }
        Ok(())
    }

    /// Delete an aggregate; its open flows fall back to Reno.
    pub fn delete(&mut self, name: &str) -> Result<(), MpatError> {
        let agg = self
            .aggs
            .get(name)
            .ok_or_else(|| MpatError::Unknown(name.into()))?;
        self.kernel.remove_aggregate(agg.id).map_err(kernel)?;
        if let Some(a) = self.aggs.remove(name) {
            for (r, _) in a.members {
                self.samples.remove(&(r.dst, r.port));
            }
        }
        Ok(())
    }

    /// Read the counters at `now_ns` and show every aggregate with its rates.
    pub fn view(&mut self, now_ns: u64) -> Result<Vec<AggregateView>, MpatError> {
        let stats = self.kernel.member_stats().map_err(kernel)?;
        let mut out = Vec::new();
        for (name, agg) in &self.aggs {
            let sum: u64 = agg.members.iter().map(|(_, w)| u64::from(*w)).sum();
            let mut members = Vec::new();
            let mut total: Option<f64> = None;
            for &(rule, weight) in &agg.members {
                let s = stats.iter().find(|s| s.rule == rule);
                let acked = s.map_or(0, |s| s.acked_bytes);
                let rate = rate(&mut self.samples, rule, now_ns, acked);
                if let Some(r) = rate {
                    *total.get_or_insert(0.0) += r;
                }
                members.push(MemberView {
                    dst: rule.dst,
                    port: rule.port,
                    weight,
                    share: f64::from(weight) / sum.max(1) as f64,
                    flows: s.map_or(0, |s| s.flows),
                    acked_bytes: acked,
                    rate_bps: rate,
                });
            }
            out.push(AggregateView {
                name: name.clone(),
                id: agg.id,
                members,
                rate_bps: total,
                kernel: self.kernel.aggregate_stats(agg.id).ok(),
                warnings: agg.warnings.clone(),
            });
        }
        Ok(out)
    }
}

/// Keep two samples per rule at least `MIN_SAMPLE_NS` apart; the rate is their delta.
fn rate(samples: &mut SampleMap, rule: MemberRule, now_ns: u64, acked_bytes: u64) -> Option<f64> {
    let cur = Sample {
        t_ns: now_ns,
        acked_bytes,
    };
    let e = samples.entry((rule.dst, rule.port)).or_insert((None, cur));
    if now_ns.saturating_sub(e.1.t_ns) >= MIN_SAMPLE_NS {
        *e = (Some(e.1), cur);
    }
    let old = e.0?;
    let dt = e.1.t_ns.saturating_sub(old.t_ns);
    // A rule re-made in the kernel restarts its counter: no rate across that.
    let db = e.1.acked_bytes.checked_sub(old.acked_bytes)?;
    (dt > 0).then(|| db as f64 * 8.0 / (dt as f64 / 1e9))
}

/// The book behind the API, or why there is none.
pub struct MpatState {
    book: Result<Mutex<Book>, String>,
}

impl MpatState {
    pub fn new(book: Book) -> MpatState {
        MpatState {
            book: Ok(Mutex::new(book)),
        }
    }

    pub fn unavailable(why: String) -> MpatState {
        MpatState { book: Err(why) }
    }

    /// Load the kernel's MPAT and create the configured aggregates.
    pub fn start(cfg: &MpatConfig, paths: &BTreeMap<IpAddr, PathInfo>) -> MpatState {
        let controls = match MpatControls::load() {
            Ok(c) => c,
            Err(e) => return MpatState::unavailable(e.to_string()),
        };
        let mut book = Book::new(Box::new(controls));
        for a in &cfg.aggregates {
            if let Err(e) = book.create(a, paths) {
                return MpatState::unavailable(format!("aggregate {:?}: {e}", a.name));
            }
        }
        MpatState::new(book)
    }

    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Book) -> Result<T, MpatError>,
    ) -> Result<T, MpatError> {
        match &self.book {
            Err(why) => Err(MpatError::Unavailable(why.clone())),
            Ok(m) => {
                let mut g = m
                    .lock()
                    .map_err(|_| MpatError::Kernel("MPAT state poisoned".into()))?;
                f(&mut g)
            }
        }
    }

    pub fn view(&self, now_ns: u64) -> MpatView {
        match self.with(|b| b.view(now_ns)) {
            Ok(aggregates) => MpatView {
                configured: true,
                available: true,
                unavailable_reason: None,
                aggregates,
            },
            Err(e) => MpatView {
                configured: true,
                available: false,
                unavailable_reason: Some(match e {
                    MpatError::Unavailable(why) => why,
                    e => e.to_string(),
                }),
                aggregates: Vec::new(),
            },
        }
    }
}

/// Check `[mpat]` without loading anything (config parsing).
pub fn check_config(c: &MpatConfig) -> Result<(), String> {
    if c.aggregates.len() > MAX_AGGREGATES {
        return Err(format!("at most {MAX_AGGREGATES} aggregates"));
    }
    let mut seen: Vec<MemberRule> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for a in &c.aggregates {
        check_name(&a.name).map_err(|e| e.to_string())?;
        if names.contains(&a.name.as_str()) {
            return Err(format!("aggregate {:?} is named twice", a.name));
        }
        names.push(&a.name);
        if a.members.is_empty() || a.members.len() > MAX_MEMBERS {
            return Err(format!(
                "aggregate {:?} needs 1..={MAX_MEMBERS} members",
                a.name
            ));
        }
        for m in &a.members {
            if m.dst.is_none() && m.port.is_none() {
                return Err(format!(
                    "aggregate {:?}: a member needs dst or port",
                    a.name
                ));
            }
            check_weight(m).map_err(|e| e.to_string())?;
            if seen.contains(&m.rule()) {
                return Err(format!(
                    "{} is in two aggregates: a flow belongs to one",
                    describe(m.rule())
                ));
            }
            seen.push(m.rule());
        }
    }
    Ok(())
}

/// What the store's latest estimates say about each destination's path (`SRC->DST` series).
pub fn path_infos(hub: &crate::Hub) -> BTreeMap<IpAddr, PathInfo> {
    let mut out = BTreeMap::new();
    let shared = hub.store();
    let Ok(store) = shared.lock() else {
        return out;
    };
    let Ok(series) = store.series() else {
        return out;
    };
    for (path, metric) in series {
        let Some(dst) = path
            .rsplit("->")
            .next()
            .and_then(|d| d.parse::<IpAddr>().ok())
        else {
            continue;
        };
        let v = match store.latest(&path, &metric) {
            Ok(Some(r)) => r.value,
            _ => continue,
        };
        let e = out.entry(dst).or_insert_with(|| PathInfo {
            path: path.clone(),
            capacity_bps: None,
            rtt_s: None,
        });
        match metric.as_str() {
            "capacity" => e.capacity_bps = Some(v),
            "rtt" => e.rtt_s = Some(v),
            _ => {}
        }
    }
    out
}

/// Prometheus: per aggregate its rate, windows, C and counters; per member rule its weight,
/// share, rate, flows and acked bytes.
pub fn metrics(reg: &mut prometheus_client::registry::Registry, v: &MpatView) {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use std::sync::atomic::AtomicU64;
    type L = Vec<(&'static str, String)>;
    type G = Family<L, Gauge<f64, AtomicU64>>;
    type C = Family<L, Counter<u64>>;
    let gauge = |reg: &mut prometheus_client::registry::Registry, n: &str, h: &str| {
        let f = G::default();
        reg.register(n, h, f.clone());
        f
    };
    let counter = |reg: &mut prometheus_client::registry::Registry, n: &str, h: &str| {
        let f = C::default();
        reg.register(n, h, f.clone());
        f
    };
    let avail = Gauge::<i64>::default();
    avail.set(i64::from(v.available));
    reg.register("mpat_available", "1 while mgrp_mpat is loaded", avail);
    let agg_rate = gauge(
        reg,
        "mpat_aggregate_rate_bps",
        "Aggregate's acked rate, bit/s",
    );
    let windows = gauge(
        reg,
        "mpat_aggregate_windows",
        "Member flows (windows) open now",
    );
    let cwnd = gauge(
        reg,
        "mpat_aggregate_cwnd_pkts",
        "C, the sum of the windows, packets",
    );
    let halvings = counter(reg, "mpat_aggregate_halvings", "Window halvings");
    let losses = counter(reg, "mpat_aggregate_losses", "Member loss episodes");
    let refused = counter(
        reg,
        "mpat_aggregate_refused",
        "Flows that matched a full aggregate and ran unaggregated",
    );
    let warn = gauge(
        reg,
        "mpat_aggregate_warnings",
        "Shared-bottleneck warnings (0: one destination, or paths that agree)",
    );
    let weight = gauge(reg, "mpat_member_weight", "Member rule's weight");
    let share = gauge(
        reg,
        "mpat_member_share",
        "Member rule's weight / the aggregate's",
    );
    let rate = gauge(
        reg,
        "mpat_member_rate_bps",
        "Member rule's acked rate, bit/s",
    );
    let flows = counter(reg, "mpat_member_flows", "Sockets that matched the rule");
    let acked = counter(
        reg,
        "mpat_member_acked_bytes",
        "Bytes acked on the rule's sockets",
    );
    for a in &v.aggregates {
        let l: L = vec![("aggregate", a.name.clone())];
        agg_rate.get_or_create(&l).set(a.rate_bps.unwrap_or(0.0));
        warn.get_or_create(&l).set(a.warnings.len() as f64);
        if let Some(k) = &a.kernel {
            windows.get_or_create(&l).set(f64::from(k.windows));
            cwnd.get_or_create(&l).set(k.cwnd_pkts);
            halvings.get_or_create(&l).inc_by(k.halvings);
            losses.get_or_create(&l).inc_by(k.losses);
            refused.get_or_create(&l).inc_by(k.refused);
        }
        for m in &a.members {
            let l: L = vec![
                ("aggregate", a.name.clone()),
                ("dst", m.dst.map_or_else(|| "*".into(), |d| d.to_string())),
                ("port", m.port.map_or_else(|| "*".into(), |p| p.to_string())),
            ];
            weight.get_or_create(&l).set(f64::from(m.weight));
            share.get_or_create(&l).set(m.share);
            rate.get_or_create(&l).set(m.rate_bps.unwrap_or(0.0));
            flows.get_or_create(&l).inc_by(m.flows);
            acked.get_or_create(&l).inc_by(m.acked_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ServiceConfig;

    #[test]
    fn config_section_and_its_refusals() {
        let c = ServiceConfig::parse(
            "[mpat]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = [{ dst = \"10.0.0.2\", port = 443, weight = 5 }, { port = 22, weight = 1 }]",
        )
        .unwrap();
        let m = c.mpat.unwrap();
        assert_eq!(m.aggregates[0].members[0].weight, 5.0);
        assert!(ServiceConfig::parse("[mpat]")
            .unwrap()
            .mpat
            .unwrap()
            .aggregates
            .is_empty());
        assert!(ServiceConfig::parse("").unwrap().mpat.is_none());
        for (text, why) in [
            ("[mpat]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = [{ port = 1, weight = 0 }]", "mpat: weight of port 1"),
            ("[mpat]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = [{ port = 1, weight = 1 }]\n[[mpat.aggregate]]\nname = \"w\"\nmembers = [{ port = 1, weight = 2 }]", "port 1 is in two aggregates"),
            ("[mpat]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = [{ port = 1, weight = 1 }]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = [{ port = 2, weight = 1 }]", "\"v\" is named twice"),
            ("[mpat]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = []", "needs 1..=16 members"),
            ("[mpat]\n[[mpat.aggregate]]\nname = \"v\"\nmembers = [{ weight = 1 }]", "needs dst or port"),
            ("[mpat]\nspeed = 1", "unknown field `speed`"),
        ] {
            let e = ServiceConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}

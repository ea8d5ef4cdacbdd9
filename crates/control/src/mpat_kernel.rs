//! Loading `mgrp_mpat` and `mgrp_multcp` (`src/bpf/mpat.bpf.c`, an object of its own) and the
//! maps that make aggregates: create an aggregate, add member rules (destination and/or port →
//! aggregate, weight), reweight live, read stats, remove. Dropping [`MpatControls`] moves the
//! sockets of this network namespace still on either congestion control to the namespace's
//! default, then unregisters both.

use crate::loader::{available_congestion_controls, default_fallback, preflight};
use crate::maps::{as_bytes, from_bytes};
use crate::Error;
use libbpf_rs::{Link, MapCore, MapFlags, Object, ObjectBuilder};
use std::net::{IpAddr, Ipv6Addr};

const MPAT_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mpat.bpf.o"));

/// Aggregates the kernel holds (`MGRP_MPAT_AGGS`); the id is the slot.
pub const MAX_AGGREGATES: u32 = 64;
/// Member flows (windows) per aggregate (`MGRP_MPAT_WINDOWS`); more flows run unaggregated.
pub const MAX_WINDOWS: usize = 16;
/// Largest weight: shares are integer ratios, and Σ weights must fit 32 bits.
pub const MAX_WEIGHT: u32 = 1_000_000;

pub const MPAT_CC: &str = "mgrp_mpat";
pub const MULTCP_CC: &str = "mgrp_multcp";

/// Which sockets a rule makes members: destination and/or remote port (at least one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MemberRule {
    pub dst: Option<IpAddr>,
    pub port: Option<u16>,
}

/// `struct mgrp_mpat_rule_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RawRuleKey {
    addr: [u8; 16],
    port: u16,
    pad: u16,
}

impl From<MemberRule> for RawRuleKey {
    fn from(r: MemberRule) -> Self {
        // 0.0.0.0 and :: mean any destination, as None does.
        let addr = r
            .dst
            .filter(|d| !d.is_unspecified())
            .map_or([0; 16], |ip| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            });
        RawRuleKey {
            addr,
            port: r.port.unwrap_or(0),
            pad: 0,
        }
    }
}

impl RawRuleKey {
    fn rule(&self) -> MemberRule {
        let v6 = Ipv6Addr::from(self.addr);
        let dst =
            (self.addr != [0; 16]).then(|| v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4));
        MemberRule {
            dst,
            port: (self.port != 0).then_some(self.port),
        }
    }
}

/// `struct mgrp_mpat_rule`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RawRule {
    agg: u32,
    weight: u32,
    flows: u64,
    acked_bytes: u64,
}

/// `struct mgrp_mpat_agg` (the leading u32 is the kernel's spin lock).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct RawAgg {
    lock: u32,
    used: u32,
    n: u32,
    weight_sum: u32,
    gen: u32,
    pad: u32,
    csum_milli: u64,
    cwnd_milli: [u32; MAX_WINDOWS],
    ssthresh_milli: [u32; MAX_WINDOWS],
    last_halving_ns: [u64; MAX_WINDOWS],
    acks: u64,
    losses: u64,
    halvings: u64,
    flows_opened: u64,
    flows_closed: u64,
    refused: u64,
}

/// An aggregate's state as the kernel has it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AggregateStats {
    pub id: u32,
    /// Windows = member flows open now.
    pub windows: u32,
    pub weight_sum: u32,
    /// C = ΣC_j, packets.
    pub cwnd_pkts: f64,
    pub window_cwnd_pkts: Vec<f64>,
    pub acks: u64,
    pub losses: u64,
    pub halvings: u64,
    pub flows_opened: u64,
    pub flows_closed: u64,
    /// Flows that matched when the aggregate already had `MAX_WINDOWS` members.
    pub refused: u64,
}

/// A member rule's counters.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemberStats {
    pub rule: MemberRule,
    pub aggregate: u32,
    pub weight: u32,
    pub flows: u64,
    pub acked_bytes: u64,
}

/// The loaded MPAT and mulTCP congestion controls.
pub struct MpatControls {
    // Links before the object: dropping a link unregisters its congestion control.
    links: Vec<Link>,
    obj: Object,
}

impl std::fmt::Debug for MpatControls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpatControls").finish_non_exhaustive()
    }
}

impl MpatControls {
    /// Load and register `mgrp_mpat` and `mgrp_multcp`.
    pub fn load() -> Result<MpatControls, Error> {
        preflight()?;
        let available = available_congestion_controls()?;
        for cc in [MPAT_CC, MULTCP_CC] {
            if available.iter().any(|a| a == cc) {
                return Err(Error::AlreadyRegistered(cc.into()));
            }
        }
        let fallback = default_fallback()?;
        let mut open = ObjectBuilder::default()
            .open_memory(MPAT_OBJECT)
            .map_err(Error::bpf("opening the MPAT object"))?;
        // `fallback_cc` is the only variable in .data: where sockets go when this unloads.
        let mut name = [0u8; 16];
        name[..fallback.len()].copy_from_slice(fallback.as_bytes());
        for mut m in open.maps_mut() {
            if m.name().to_string_lossy().ends_with(".data") {
                m.set_initial_value(&name)
                    .map_err(Error::bpf("setting the fallback congestion control"))?;
            }
        }
        let mut obj = open.load().map_err(Error::bpf("loading MPAT (verifier)"))?;
        let mut links = Vec::new();
        for cc in [MPAT_CC, MULTCP_CC] {
            let mut map = obj
                .maps_mut()
                .find(|m| m.name() == cc)
                .ok_or_else(|| Error::Unsupported(format!("{cc} missing from the object")))?;
            let link = map
                .attach_struct_ops()
                .map_err(Error::bpf(format!("registering {cc}")))?;
            links.push(link);
        }
        Ok(MpatControls { links, obj })
    }

    fn map(&self, name: &str) -> Result<libbpf_rs::Map<'_>, Error> {
        self.obj
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| Error::Unsupported(format!("map {name} missing from the object")))
    }

    fn raw_agg(&self, id: u32) -> Result<RawAgg, Error> {
        if id >= MAX_AGGREGATES {
            return Err(Error::BadInput(format!("no aggregate {id}")));
        }
        Ok(self
            .map("mpat_aggs")?
            .lookup(&id.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("reading an aggregate"))?
            .and_then(|b| from_bytes::<RawAgg>(&b))
            .unwrap_or_default())
    }

    fn write_agg(&self, id: u32, a: &RawAgg) -> Result<(), Error> {
        self.map("mpat_aggs")?
            .update(&id.to_ne_bytes(), as_bytes(a), MapFlags::ANY)
            .map_err(Error::bpf("writing an aggregate"))
    }

    fn known_agg(&self, id: u32) -> Result<RawAgg, Error> {
        let a = self.raw_agg(id)?;
        if a.used == 0 {
            return Err(Error::BadInput(format!("no aggregate {id}")));
        }
        Ok(a)
    }

    /// A new, empty aggregate; its id is what member rules name.
    pub fn create_aggregate(&self) -> Result<u32, Error> {
        for id in 0..MAX_AGGREGATES {
            let old = self.raw_agg(id)?;
            if old.used == 0 {
                // A new generation: members of a removed aggregate in this slot stay out.
                let a = RawAgg {
                    used: 1,
                    gen: old.gen.wrapping_add(1),
                    ..Default::default()
                };
                self.write_agg(id, &a)?;
                return Ok(id);
            }
        }
        Err(Error::BadInput(format!(
            "all {MAX_AGGREGATES} aggregates are in use"
        )))
    }

    /// Remove an aggregate and its member rules. Its open member flows fall back to Reno.
    pub fn remove_aggregate(&self, id: u32) -> Result<(), Error> {
        let old = self.known_agg(id)?;
        for (key, rule) in self.raw_rules()? {
            if rule.agg == id {
                self.remove_member(key.rule())?;
            }
        }
        let gone = RawAgg {
            gen: old.gen,
            ..Default::default()
        };
        self.write_agg(id, &gone)
    }

    fn raw_rules(&self) -> Result<Vec<(RawRuleKey, RawRule)>, Error> {
        let map = self.map("mpat_rules")?;
        let mut out = Vec::new();
        for k in map.keys() {
            let (Some(key), Some(v)) = (
                from_bytes::<RawRuleKey>(&k),
                map.lookup(&k, MapFlags::ANY).ok().flatten(),
            ) else {
                continue;
            };
            if let Some(r) = from_bytes::<RawRule>(&v) {
                out.push((key, r));
            }
        }
        Ok(out)
    }

    fn raw_rule(&self, rule: MemberRule) -> Result<Option<RawRule>, Error> {
        let key = RawRuleKey::from(rule);
        Ok(self
            .map("mpat_rules")?
            .lookup(as_bytes(&key), MapFlags::ANY)
            .map_err(Error::bpf("reading a member rule"))?
            .and_then(|b| from_bytes::<RawRule>(&b)))
    }

    /// Sockets on `mgrp_mpat` matching `rule` join aggregate `agg` with `weight` (> 0).
    pub fn add_member(&self, agg: u32, rule: MemberRule, weight: u32) -> Result<(), Error> {
        check_rule(rule)?;
        check_weight(weight)?;
        self.known_agg(agg)?;
        if let Some(old) = self.raw_rule(rule)? {
            return Err(Error::BadInput(format!(
                "{} is already a member of aggregate {}: a flow belongs to one aggregate",
                describe(rule),
                old.agg
            )));
        }
        let key = RawRuleKey::from(rule);
        let v = RawRule {
            agg,
            weight,
            ..Default::default()
        };
        self.map("mpat_rules")?
            .update(as_bytes(&key), as_bytes(&v), MapFlags::NO_EXIST)
            .map_err(Error::bpf(format!("adding {}", describe(rule))))
    }

    /// Change a member rule's weight; its open flows take it at their next ack.
    pub fn set_weight(&self, rule: MemberRule, weight: u32) -> Result<(), Error> {
        check_weight(weight)?;
        let mut v = self
            .raw_rule(rule)?
            .ok_or_else(|| Error::BadInput(format!("no member rule {}", describe(rule))))?;
        // Counters added by the programs between this read and the write are lost: they are
        // statistics, and the weight is what matters.
        v.weight = weight;
        let key = RawRuleKey::from(rule);
        self.map("mpat_rules")?
            .update(as_bytes(&key), as_bytes(&v), MapFlags::EXIST)
            .map_err(Error::bpf(format!("reweighting {}", describe(rule))))
    }

    pub fn remove_member(&self, rule: MemberRule) -> Result<(), Error> {
        let key = RawRuleKey::from(rule);
        match self.map("mpat_rules")?.delete(as_bytes(&key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Err(Error::BadInput(format!(
                "no member rule {}",
                describe(rule)
            ))),
            Err(e) => Err(Error::bpf(format!("removing {}", describe(rule)))(e)),
        }
    }

    pub fn aggregate_stats(&self, id: u32) -> Result<AggregateStats, Error> {
        let a = self.known_agg(id)?;
        let n = (a.n as usize).min(MAX_WINDOWS);
        Ok(AggregateStats {
            id,
            windows: a.n,
            weight_sum: a.weight_sum,
            cwnd_pkts: a.csum_milli as f64 / 1000.0,
            window_cwnd_pkts: a.cwnd_milli[..n]
                .iter()
                .map(|c| *c as f64 / 1000.0)
                .collect(),
            acks: a.acks,
            losses: a.losses,
            halvings: a.halvings,
            flows_opened: a.flows_opened,
            flows_closed: a.flows_closed,
            refused: a.refused,
        })
    }

    /// Every member rule with its counters.
    pub fn member_stats(&self) -> Result<Vec<MemberStats>, Error> {
        Ok(self
            .raw_rules()?
            .into_iter()
            .map(|(k, r)| MemberStats {
                rule: k.rule(),
                aggregate: r.agg,
                weight: r.weight,
                flows: r.flows,
                acked_bytes: r.acked_bytes,
            })
            .collect())
    }

    /// mulTCP's N (1..=1000): one `mgrp_multcp` flow acts as N Reno flows.
    pub fn set_multcp_n(&self, n: u32) -> Result<(), Error> {
        if !(1..=1000).contains(&n) {
            return Err(Error::BadInput(format!(
                "mulTCP's N must be in 1..=1000, got {n}"
            )));
        }
        self.map("multcp_n")?
            .update(&0u32.to_ne_bytes(), &n.to_ne_bytes(), MapFlags::ANY)
            .map_err(Error::bpf("setting mulTCP's N"))
    }
}

impl MpatControls {
    /// Move every socket of the calling thread's network namespace on `mgrp_mpat` or
    /// `mgrp_multcp` to the fallback; returns how many moved (in total so far).
    pub fn reset_sockets(&self) -> Result<u64, Error> {
        crate::loader::reset_sockets(&self.obj, "mpat_reset", "mpat_reset_moved")
    }
}

impl Drop for MpatControls {
    fn drop(&mut self) {
        // Sockets on a congestion control being unregistered keep running its code until they
        // close; move them to the default instead.
        let _ = self.reset_sockets();
        self.links.clear();
    }
}

fn check_weight(weight: u32) -> Result<(), Error> {
    if weight == 0 || weight > MAX_WEIGHT {
        return Err(Error::BadInput(format!(
            "weight must be in 1..={MAX_WEIGHT}, got {weight}"
        )));
    }
    Ok(())
}

fn check_rule(rule: MemberRule) -> Result<(), Error> {
    let unspecified = rule.dst.is_none_or(|d| d.is_unspecified());
    if unspecified && rule.port.is_none_or(|p| p == 0) {
        return Err(Error::BadInput(
            "a member rule needs a destination or a port".into(),
        ));
    }
    Ok(())
}

fn describe(rule: MemberRule) -> String {
    match (rule.dst, rule.port) {
        (Some(d), Some(p)) => format!("destination {d} port {p}"),
        (Some(d), None) => format!("destination {d}"),
        (None, Some(p)) => format!("port {p}"),
        (None, None) => "an empty rule".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<RawRuleKey>(), 20);
        assert_eq!(std::mem::size_of::<RawRule>(), 24);
        // 6 × u32, u64, 2 × 16 × u32, 16 × u64, 6 × u64.
        assert_eq!(std::mem::size_of::<RawAgg>(), 24 + 8 + 128 + 128 + 48);
    }

    #[test]
    fn rules_round_trip_and_bad_input_is_refused() {
        let r = MemberRule {
            dst: Some("198.18.3.2".parse().unwrap()),
            port: Some(5201),
        };
        assert_eq!(RawRuleKey::from(r).rule(), r);
        let p = MemberRule {
            dst: None,
            port: Some(80),
        };
        assert_eq!(RawRuleKey::from(p).rule(), p);
        assert!(check_rule(MemberRule {
            dst: None,
            port: None
        })
        .is_err());
        assert!(check_rule(MemberRule {
            dst: Some("0.0.0.0".parse().unwrap()),
            port: Some(0)
        })
        .is_err());
        assert!(check_weight(0).is_err());
        assert!(check_weight(MAX_WEIGHT + 1).is_err());
        assert!(check_weight(3).is_ok());
    }
}

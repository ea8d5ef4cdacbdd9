//! Loading the congestion controls, registering them with the kernel, and the maps the agent
//! reads and writes. Dropping [`Controls`] moves the sockets of this network namespace that still
//! use one of them to the namespace's default, then unregisters them.

use crate::maps::{as_bytes, from_bytes, PathEntry, PathKey, RawModeStats};
use crate::Error;
use libbpf_rs::{Iter, Link, MapCore, MapFlags, Object, ObjectBuilder};
use std::io::Read;
use std::net::IpAddr;

#[cfg(not(mgrp_no_bpf))]
pub(crate) const NO_BPF: Option<&str> = None;
#[cfg(mgrp_no_bpf)]
pub(crate) const NO_BPF: Option<&str> =
    Some(include_str!(concat!(env!("OUT_DIR"), "/no_bpf_reason.txt")));

const CC_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mgrp_cc.bpf.o"));

/// A transfer mode: one of the congestion controls in this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Background,
    FullSpeed,
    Ledbat,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Background, Mode::FullSpeed, Mode::Ledbat];

    /// The congestion control's kernel name (`TCP_CONGESTION`, `ip route … congctl`).
    pub fn cc_name(self) -> &'static str {
        match self {
            Mode::Background => "mgrp_bg",
            Mode::FullSpeed => "mgrp_fs",
            Mode::Ledbat => "mgrp_ledbat",
        }
    }

    /// The struct_ops map that registers it (same as the name).
    fn ops_map(self) -> &'static str {
        self.cc_name()
    }

    /// Index into the `stats` map (`MGRP_MODE_*`).
    fn index(self) -> u32 {
        match self {
            Mode::Background => 0,
            Mode::FullSpeed => 1,
            Mode::Ledbat => 2,
        }
    }

    /// `background`/`bg`/`mgrp_bg`, `full-speed`/`fs`/`mgrp_fs`, `ledbat`/`mgrp_ledbat`.
    pub fn parse(s: &str) -> Result<Mode, Error> {
        match s.to_ascii_lowercase().as_str() {
            "background" | "bg" | "mgrp_bg" => Ok(Mode::Background),
            "full-speed" | "full_speed" | "fullspeed" | "fs" | "mgrp_fs" => Ok(Mode::FullSpeed),
            "ledbat" | "mgrp_ledbat" => Ok(Mode::Ledbat),
            _ => Err(Error::BadInput(format!(
                "unknown transfer mode {s:?} (background, full-speed, ledbat)"
            ))),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Background => "background",
            Mode::FullSpeed => "full-speed",
            Mode::Ledbat => "ledbat",
        })
    }
}

/// A mode's counters, as the agent reports them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModeStats {
    pub mode: Mode,
    pub congestion_control: String,
    pub flows_opened: u64,
    /// Sockets on it now (opened − closed).
    pub flows_active: u64,
    pub acked_bytes: u64,
    pub acks: u64,
    /// Acks handled by plain Reno because the path had no fresh estimate.
    pub acks_no_estimate: u64,
    /// Background: acks at which the cap held the window down, and the time spent so.
    pub acks_limited: u64,
    pub limited_s: f64,
    pub losses: u64,
}

/// The congestion controls the kernel offers in this network namespace.
pub fn available_congestion_controls() -> Result<Vec<String>, Error> {
    let p = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let s = std::fs::read_to_string(p).map_err(Error::io(p))?;
    Ok(s.split_whitespace().map(str::to_string).collect())
}

/// The transfer modes registered in the kernel now (by any process: an agent, `mgrp control
/// load`).
pub fn registered_modes() -> Result<Vec<Mode>, Error> {
    let avail = available_congestion_controls()?;
    Ok(Mode::ALL
        .into_iter()
        .filter(|m| avail.iter().any(|a| a == m.cc_name()))
        .collect())
}

/// The congestion control new sockets of this network namespace get by default.
pub fn default_congestion_control() -> Result<String, Error> {
    let p = "/proc/sys/net/ipv4/tcp_congestion_control";
    let s = std::fs::read_to_string(p).map_err(Error::io(p))?;
    Ok(s.trim().to_string())
}

/// Checks that hold before any BPF call, so that the error says what is missing.
pub(crate) fn preflight() -> Result<(), Error> {
    if let Some(why) = NO_BPF {
        return Err(Error::Unsupported(format!(
            "this build has no eBPF programs: {why}"
        )));
    }
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::Permission("run as root".into()));
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(Error::Unsupported(
            "the kernel has no BTF (/sys/kernel/btf/vmlinux)".into(),
        ));
    }
    Ok(())
}

/// The loaded congestion controls and their maps.
pub struct Controls {
    // Links before the object: dropping a link unregisters its congestion control.
    links: Vec<(Mode, Link)>,
    obj: Object,
}

impl std::fmt::Debug for Controls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controls")
            .field("modes", &self.modes())
            .finish()
    }
}

impl Controls {
    /// Load the programs and register `modes` with the kernel (all of them if empty). Sockets
    /// left on one of them when this is dropped are moved to `fallback` (the namespace's
    /// default congestion control if `None`).
    pub fn load(modes: &[Mode]) -> Result<Controls, Error> {
        preflight()?;
        let modes: Vec<Mode> = if modes.is_empty() {
            Mode::ALL.to_vec()
        } else {
            modes.to_vec()
        };
        let available = available_congestion_controls()?;
        for m in &modes {
            if available.iter().any(|a| a == m.cc_name()) {
                return Err(Error::AlreadyRegistered(m.cc_name().into()));
            }
        }
        let fallback = default_fallback()?;
        let mut open = ObjectBuilder::default()
            .open_memory(CC_OBJECT)
            .map_err(Error::bpf("opening the congestion controls' object"))?;
        // `fallback_cc` is the only variable in .data.
        let mut name = [0u8; 16];
        name[..fallback.len()].copy_from_slice(fallback.as_bytes());
        for mut m in open.maps_mut() {
            let n = m.name().to_string_lossy().into_owned();
            if n.ends_with(".data") {
                m.set_initial_value(&name)
                    .map_err(Error::bpf("setting the fallback congestion control"))?;
            }
            // Only the modes asked for are created in the kernel.
            if let Some(mode) = Mode::ALL.iter().find(|x| x.ops_map() == n) {
                m.set_autocreate(modes.contains(mode))
                    .map_err(Error::bpf("choosing the modes to load"))?;
            }
        }
        let mut obj = open
            .load()
            .map_err(Error::bpf("loading the congestion controls (verifier)"))?;
        let mut links = Vec::new();
        for mode in &modes {
            let mut map = obj
                .maps_mut()
                .find(|m| m.name() == mode.ops_map())
                .ok_or_else(|| {
                    Error::Unsupported(format!("{} missing from the object", mode.ops_map()))
                })?;
            let link = map
                .attach_struct_ops()
                .map_err(Error::bpf(format!("registering {}", mode.cc_name())))?;
            links.push((*mode, link));
        }
        Ok(Controls { links, obj })
    }

    /// The modes registered by this object.
    pub fn modes(&self) -> Vec<Mode> {
        self.links.iter().map(|(m, _)| *m).collect()
    }

    fn map(&self, name: &str) -> Result<libbpf_rs::Map<'_>, Error> {
        self.obj
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| Error::Unsupported(format!("map {name} missing from the object")))
    }

    /// Write what the programs should know about the path to `dst`.
    pub fn set_path(&self, dst: IpAddr, entry: &PathEntry) -> Result<(), Error> {
        let key = PathKey::from(dst);
        self.map("paths")?
            .update(as_bytes(&key), as_bytes(entry), MapFlags::ANY)
            .map_err(Error::bpf(format!("writing the path to {dst}")))
    }

    pub fn remove_path(&self, dst: IpAddr) -> Result<(), Error> {
        let key = PathKey::from(dst);
        match self.map("paths")?.delete(as_bytes(&key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::bpf(format!("removing the path to {dst}"))(e)),
        }
    }

    pub fn path(&self, dst: IpAddr) -> Result<Option<PathEntry>, Error> {
        let key = PathKey::from(dst);
        let v = self
            .map("paths")?
            .lookup(as_bytes(&key), MapFlags::ANY)
            .map_err(Error::bpf("reading a path"))?;
        Ok(v.and_then(|b| from_bytes(&b)))
    }

    /// Every destination in the map with its entry.
    pub fn paths(&self) -> Result<Vec<(IpAddr, PathEntry)>, Error> {
        let map = self.map("paths")?;
        let mut out = Vec::new();
        for k in map.keys() {
            let (Some(key), Some(v)) = (
                from_bytes::<[u8; 16]>(&k),
                map.lookup(&k, MapFlags::ANY).ok().flatten(),
            ) else {
                continue;
            };
            if let Some(e) = from_bytes::<PathEntry>(&v) {
                out.push((PathKey { addr: key }.ip(), e));
            }
        }
        Ok(out)
    }

    /// Bytes acked so far on background flows to `dst` (all of them together).
    pub fn bg_acked_bytes(&self, dst: IpAddr) -> Result<u64, Error> {
        let key = PathKey::from(dst);
        let v = self
            .map("bg_acked")?
            .lookup(as_bytes(&key), MapFlags::ANY)
            .map_err(Error::bpf("reading background bytes"))?;
        Ok(v.and_then(|b| from_bytes::<u64>(&b)).unwrap_or(0))
    }

    /// Every mode's counters (also of the modes not registered: zero).
    pub fn stats(&self) -> Result<Vec<ModeStats>, Error> {
        let map = self.map("stats")?;
        let mut out = Vec::new();
        for mode in Mode::ALL {
            let raw = map
                .lookup(&mode.index().to_ne_bytes(), MapFlags::ANY)
                .map_err(Error::bpf("reading the modes' counters"))?
                .and_then(|b| from_bytes::<RawModeStats>(&b))
                .unwrap_or_default();
            out.push(ModeStats {
                mode,
                congestion_control: mode.cc_name().into(),
                flows_opened: raw.flows_opened,
                flows_active: raw.flows_opened.saturating_sub(raw.flows_closed),
                acked_bytes: raw.acked_bytes,
                acks: raw.acks,
                acks_no_estimate: raw.acks_no_estimate,
                acks_limited: raw.acks_limited,
                limited_s: raw.limited_ns as f64 / 1e9,
                losses: raw.losses,
            });
        }
        Ok(out)
    }

    /// Move every socket of the calling thread's network namespace that uses one of mgrp's
    /// congestion controls to the fallback; returns how many moved (in total so far).
    pub fn reset_sockets(&self) -> Result<u64, Error> {
        reset_sockets(&self.obj, "mgrp_reset", "reset_moved")
    }
}

impl Drop for Controls {
    fn drop(&mut self) {
        // Sockets on a congestion control that is being unregistered keep running its code
        // until they close; move them to the default instead of leaving them stranded.
        let _ = self.reset_sockets();
        self.links.clear();
    }
}

/// Run the object's `iter/tcp` program `prog` over the calling thread's network namespace (it
/// moves sockets off the object's congestion controls) and read its running count `moved_map`.
pub(crate) fn reset_sockets(obj: &Object, prog: &str, moved_map: &str) -> Result<u64, Error> {
    let p = obj
        .progs_mut()
        .find(|p| p.name() == prog)
        .ok_or_else(|| Error::Unsupported(format!("{prog} missing from the object")))?;
    let link = p
        .attach_iter_with_opts(libbpf_rs::IterOpts::None)
        .map_err(Error::bpf("attaching the socket iterator"))?;
    let mut it = Iter::new(&link).map_err(Error::bpf("creating the socket iterator"))?;
    let mut sink = Vec::new();
    it.read_to_end(&mut sink)
        .map_err(Error::io("walking the TCP sockets"))?;
    let map = obj
        .maps()
        .find(|m| m.name() == moved_map)
        .ok_or_else(|| Error::Unsupported(format!("map {moved_map} missing from the object")))?;
    Ok(map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(Error::bpf("reading the reset count"))?
        .and_then(|b| from_bytes::<u64>(&b))
        .unwrap_or(0))
}

/// The namespace's default congestion control, unless it is one of ours (then cubic).
pub(crate) fn default_fallback() -> Result<String, Error> {
    let p = "/proc/sys/net/ipv4/tcp_congestion_control";
    let cur = std::fs::read_to_string(p).map_err(Error::io(p))?;
    let cur = cur.trim();
    if cur.is_empty() || cur.starts_with("mgrp_") || cur.len() >= 16 {
        Ok("cubic".into())
    } else {
        Ok(cur.into())
    }
}

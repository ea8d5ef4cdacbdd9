//! Policy routing that sends opted-in traffic into the TUN device, and its undo.
//!
//! What [`Routing::install`] runs (iproute2), for device `mgrp0` and opt-in by destination:
//! ```text
//! ip link set dev mgrp0 up
//! ip route replace default dev mgrp0 table 7240 [src ADDR]
//! ip rule add fwmark 0x6d677270 lookup main pref 7230   # the agent's own sockets bypass
//! ip rule add to 198.18.3.2 lookup 7240 pref 7231       # or: ipproto tcp dport 5001 / fwmark M
//! ```
//! Dropping the [`Routing`] deletes the rules and flushes the table. The per-socket opt-in (the
//! seed's `TCP_MGRP`) is `SO_MARK`: an application marks its socket and the `fwmark` rule routes it.

use crate::{Error, BYPASS_MARK, TABLE};
use std::process::Command;

/// An opt-in that did not parse: the input and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?}: {why}")]
pub struct OptInError {
    pub input: String,
    pub why: OptInProblem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptInProblem {
    #[error("expected to:PREFIX, tcp:PORT, udp:PORT or mark:N")]
    NoKind,
    #[error("port must be 1..=65535")]
    BadPort,
    #[error("not an IPv4 address")]
    NotIpv4,
    #[error("prefix length must be 0..=32")]
    BadPrefixLen,
    #[error("mark must be a 32-bit number")]
    BadMark,
    #[error("mark 0 and {BYPASS_MARK:#x} are reserved")]
    ReservedMark,
    #[error("unknown opt-in kind {0:?}")]
    UnknownKind(String),
}

/// Which of the host's traffic rides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptIn {
    /// Traffic to an address or prefix (`198.18.3.2`, `198.18.3.0/24`).
    To(String),
    /// TCP to a destination port.
    TcpPort(u16),
    /// UDP to a destination port.
    UdpPort(u16),
    /// Sockets marked with `SO_MARK` = this.
    Mark(u32),
}

impl OptIn {
    /// `to:PREFIX`, `tcp:PORT`, `udp:PORT`, `mark:N` (decimal or 0x hex).
    pub fn parse(s: &str) -> Result<OptIn, OptInError> {
        let err = |why| OptInError {
            input: s.into(),
            why,
        };
        let (kind, v) = s.split_once(':').ok_or(err(OptInProblem::NoKind))?;
        let port = |v: &str| {
            v.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or(err(OptInProblem::BadPort))
        };
        match kind {
            "to" => {
                let (addr, len) = v.split_once('/').unwrap_or((v, "32"));
                addr.parse::<std::net::Ipv4Addr>()
                    .map_err(|_| err(OptInProblem::NotIpv4))?;
                len.parse::<u8>()
                    .ok()
                    .filter(|l| *l <= 32)
                    .ok_or(err(OptInProblem::BadPrefixLen))?;
                Ok(OptIn::To(v.into()))
            }
            "tcp" => Ok(OptIn::TcpPort(port(v)?)),
            "udp" => Ok(OptIn::UdpPort(port(v)?)),
            "mark" => {
                let m = match v.strip_prefix("0x") {
                    Some(h) => u32::from_str_radix(h, 16),
                    None => v.parse(),
                }
                .map_err(|_| err(OptInProblem::BadMark))?;
                if m == 0 || m == BYPASS_MARK {
                    return Err(err(OptInProblem::ReservedMark));
                }
                Ok(OptIn::Mark(m))
            }
            _ => Err(err(OptInProblem::UnknownKind(kind.into()))),
        }
    }

    fn selector(&self) -> Vec<String> {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        match self {
            OptIn::To(p) => v(&["to", p]),
            OptIn::TcpPort(p) => v(&["ipproto", "tcp", "dport", &p.to_string()]),
            OptIn::UdpPort(p) => v(&["ipproto", "udp", "dport", &p.to_string()]),
            OptIn::Mark(m) => v(&["fwmark", &format!("{m:#x}")]),
        }
    }
}

fn ip(args: &[String]) -> Result<String, Error> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::io("run `ip` (iproute2)", e))?;
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn args(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

/// The installed routing; dropping it undoes what was installed.
pub struct Routing {
    rules: Vec<Vec<String>>,
    table: bool,
    table_id: u32,
}

/// The source address the main table would use towards `dst` (so opted-in sockets keep it).
fn source_for(dst: &str) -> Option<String> {
    let addr = dst.split('/').next()?;
    let out = ip(&args(&[
        "-o",
        "-4",
        "route",
        "get",
        addr,
        "mark",
        &BYPASS_MARK.to_string(),
    ]))
    .ok()?;
    let mut it = out.split_whitespace();
    while let Some(w) = it.next() {
        if w == "src" {
            return it.next().map(str::to_string);
        }
    }
    None
}

impl Routing {
    /// Route `opt_in` traffic into `dev` (which must exist: open the [`crate::tun::Tun`] first).
    pub fn install(dev: &str, opt_in: &[OptIn]) -> Result<Routing, Error> {
        Self::install_in(dev, TABLE, opt_in)
    }

    /// As [`Routing::install`], into routing table `table` with rule preferences `table − 10`
    /// (the bypass) and `table − 9` (the opt-ins): the inline engine uses its own table beside
    /// the riders'.
    pub fn install_in(dev: &str, table: u32, opt_in: &[OptIn]) -> Result<Routing, Error> {
        if opt_in.is_empty() {
            return Err(Error::Setup("nothing opted in".into()));
        }
        ip(&args(&["link", "set", "dev", dev, "up"]))?;
        let mut r = Routing {
            rules: Vec::new(),
            table: true,
            table_id: table,
        };
        let mut route = args(&["route", "replace", "default", "dev", dev, "table"]);
        route.push(table.to_string());
        let first_to = opt_in.iter().find_map(|o| match o {
            OptIn::To(p) => Some(p.clone()),
            _ => None,
        });
        if let Some(src) = first_to.as_deref().and_then(source_for) {
            route.extend(args(&["src", &src]));
        }
        ip(&route)?;
        let mut add = |sel: Vec<String>, table: &str, pref: u32| -> Result<(), Error> {
            let mut rule = args(&["rule", "add"]);
            rule.extend(sel);
            rule.extend(args(&["lookup", table, "pref", &pref.to_string()]));
            ip(&rule)?;
            rule[1] = "del".into();
            r.rules.push(rule);
            Ok(())
        };
        add(
            args(&["fwmark", &format!("{BYPASS_MARK:#x}")]),
            "main",
            table - 10,
        )?;
        for o in opt_in {
            add(o.selector(), &table.to_string(), table - 9)?;
        }
        Ok(r)
    }
}

/// Whether `opt_in` is already routed into table `table` (by another part of the agent, or by
/// an agent that died without undoing its rules): `ip rule list` is read, not changed.
pub fn opted_in(table: u32, opt_in: &OptIn) -> Result<bool, Error> {
    let list = ip(&args(&["rule", "list"]))?;
    let mut sel = opt_in.selector().join(" ");
    if let Some(s) = sel.strip_suffix("/32") {
        sel = s.to_string();
    }
    let lookup = format!("lookup {table}");
    Ok(list.lines().any(|l| {
        let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
        l.ends_with(&lookup) && l.contains(&format!(" {sel} "))
    }))
}

impl Drop for Routing {
    fn drop(&mut self) {
        for rule in self.rules.drain(..).rev() {
            let _ = ip(&rule);
        }
        if self.table {
            let _ = ip(&args(&[
                "route",
                "flush",
                "table",
                &self.table_id.to_string(),
            ]));
        }
    }
}

/// Make a receiving TUN device usable: up, and no reverse-path filter (riders arrive on it from
/// addresses that route elsewhere).
pub fn prepare_receiver(dev: &str) -> Result<(), Error> {
    ip(&args(&["link", "set", "dev", dev, "up"]))?;
    for conf in [dev, "all"] {
        let p = format!("/proc/sys/net/ipv4/conf/{conf}/rp_filter");
        std::fs::write(&p, "0").map_err(|e| Error::io(format!("write {p}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opt_in_syntax() {
        assert_eq!(
            OptIn::parse("to:198.18.3.2").unwrap(),
            OptIn::To("198.18.3.2".into())
        );
        assert_eq!(
            OptIn::parse("to:10.0.0.0/8").unwrap(),
            OptIn::To("10.0.0.0/8".into())
        );
        assert_eq!(OptIn::parse("tcp:5001").unwrap(), OptIn::TcpPort(5001));
        assert_eq!(OptIn::parse("mark:0x10").unwrap(), OptIn::Mark(16));
        for bad in [
            "",
            "to:",
            "to:host",
            "to:1.2.3.4/40",
            "tcp:0",
            "udp:70000",
            "mark:0",
            "mark:zz",
            "dns:53",
        ] {
            assert!(OptIn::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            OptIn::TcpPort(80).selector(),
            args(&["ipproto", "tcp", "dport", "80"])
        );
    }
}

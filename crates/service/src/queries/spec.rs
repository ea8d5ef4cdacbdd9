//! What a client may ask for (`POST /v1/queries`), checked without I/O: the body's fields into
//! a [`QuerySpec`], or the reason it is refused. The limits a stranger meets are here too.

use crate::http::METRICS;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Queries one client (source address) may hold at once.
pub const MAX_PER_CLIENT: usize = 16;
/// Queries the agent holds at once, all clients together.
pub const MAX_QUERIES: usize = 64;
/// The largest budget one query may have (probe bytes a minute).
pub const MAX_BUDGET: u64 = 20 * 1024 * 1024;
/// The least budget (as for configured schedules).
pub const MIN_BUDGET: u64 = 10 * 1024;
/// The sum of all queries' budgets (probe bytes a minute): what strangers may spend together.
pub const MAX_TOTAL_BUDGET: u64 = 64 * 1024 * 1024;
/// Periods allowed for periodic and event-driven queries.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
pub const MAX_EVERY: Duration = Duration::from_secs(86_400);
/// A once query retries this often (then backs off) until its estimate is stored.
pub const ONCE_RETRY: Duration = Duration::from_secs(1);

/// The agents' default port, as in `[[path]] peer`.
const DEFAULT_PORT: u16 = 7240;

/// The body of `POST /v1/queries`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    pub peer: String,
    pub mode: Option<String>,
    pub method: Option<String>,
    pub metric: Option<String>,
    pub every: Option<String>,
    /// Probe bytes a minute: a number, or text like `2mb`.
    pub budget: Option<serde_json::Value>,
    /// Event-driven: notify when the metric falls below this (number, or `5mbit`, `20ms`).
    pub below: Option<serde_json::Value>,
    /// Event-driven: notify when the metric exceeds this.
    pub exceeds: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Measure once now; the query then holds the result.
    Once,
    /// Measure every `every`.
    Periodic,
    /// Measure every `every` and notify (SSE) when the condition starts or stops holding.
    Event,
}

/// A query as accepted, kept in the store (JSON) and shown by the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuerySpec {
    pub id: String,
    /// The client that made it (source address): the per-client bound counts these.
    pub owner: String,
    pub created_ns: u64,
    pub peer: SocketAddr,
    pub mode: Mode,
    pub method: String,
    pub metric: String,
    pub every_s: f64,
    pub budget_bytes_per_min: u64,
    pub below: Option<f64>,
    pub exceeds: Option<f64>,
}

fn bad<T>(why: impl Into<String>) -> Result<T, String> {
    Err(why.into())
}

/// `IP`, `IP:PORT` or `[IPv6]:PORT`, and an address a peer agent can have.
pub fn parse_peer(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let addr = match s.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => match s.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, DEFAULT_PORT),
            Err(_) => return bad(format!("peer {s:?} is not an IP address or IP:PORT")),
        },
    };
    let ip = addr.ip();
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    if ip.is_unspecified() || ip.is_multicast() || broadcast || addr.port() == 0 {
        return bad(format!(
            "peer {addr} cannot be reached: an unspecified, multicast or broadcast address, or port 0, is no agent"
        ));
    }
    Ok(addr)
}

/// Bytes a minute: a whole number, or text like `2mb` (the configuration's units).
fn budget(v: &serde_json::Value) -> Result<u64, String> {
    let b = match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 && x.fract() == 0.0 => x as u64,
            _ => {
                return bad(format!(
                    "budget {n} must be a positive whole number of bytes"
                ))
            }
        },
        serde_json::Value::String(s) => {
            mgrp_traffic::units::parse_bytes(s).map_err(|e| format!("budget: {e}"))?
        }
        _ => return bad("budget must be a number of bytes or text like \"2mb\""),
    };
    if b < MIN_BUDGET {
        return bad(format!(
            "budget {b} B/min is below {MIN_BUDGET}: that leaves nothing to measure with"
        ));
    }
    if b > MAX_BUDGET {
        return bad(format!(
            "budget {b} B/min is above the most a query may have, {MAX_BUDGET} B/min"
        ));
    }
    Ok(b)
}

/// A threshold in the metric's unit: a number, or text (`5mbit`, `20ms`).
fn threshold(name: &str, metric: &str, v: &serde_json::Value) -> Result<f64, String> {
    let text = match v {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => s.clone(),
        _ => return bad(format!("{name} must be a number or text like \"5mbit\"")),
    };
    crate::http::threshold(name, metric, &text).map_err(|e| e.reason().to_string())
}

/// The metrics a method's rounds store.
fn metrics_of(method: &str) -> &'static [&'static str] {
    if method == crate::loss::METHOD {
        &["episode_frequency", "episode_duration", "rtt"]
    } else {
        &["avail_bw", "capacity", "rtt", "loss", "jitter"]
    }
}

impl QuerySpec {
    /// Check a request; `id`, `owner` and `now_ns` are the caller's.
    pub fn from_request(
        r: QueryRequest,
        id: String,
        owner: String,
        now_ns: u64,
    ) -> Result<QuerySpec, String> {
        let peer = parse_peer(&r.peer)?;
        let mode = match r.mode.as_deref().unwrap_or("once") {
            "once" => Mode::Once,
            "periodic" => Mode::Periodic,
            "event" => Mode::Event,
            m => return bad(format!("unknown mode {m:?}: use once, periodic or event")),
        };
        let method = r.method.unwrap_or_else(|| "auto".into());
        if method != crate::loss::METHOD {
            mgrp_estimate::methods::Method::from_name(&method)
                .map_err(|e| format!("method: {e}"))?;
        }
        let metric = r.metric.unwrap_or_else(|| {
            if method == crate::loss::METHOD {
                "episode_frequency".into()
            } else {
                "avail_bw".into()
            }
        });
        if !METRICS.contains(&metric.as_str()) {
            return bad(format!(
                "unknown metric {metric:?}: use {}",
                METRICS.join(", ")
            ));
        }
        if !metrics_of(&method).contains(&metric.as_str()) {
            return bad(format!(
                "method {method} does not measure {metric}: it gives {}",
                metrics_of(&method).join(", ")
            ));
        }
        let every = match (mode, r.every.as_deref()) {
            (Mode::Once, None) => ONCE_RETRY,
            (Mode::Once, Some(_)) => return bad("a once query has no `every`"),
            (_, None) => return bad("a periodic or event query needs `every` (1s to 24h)"),
            (_, Some(e)) => {
                let d =
                    mgrp_traffic::units::parse_duration(e).map_err(|e| format!("every: {e}"))?;
                if !(MIN_EVERY..=MAX_EVERY).contains(&d) {
                    return bad(format!(
                        "every {e:?} is out of range: from {}s to {}s",
                        MIN_EVERY.as_secs(),
                        MAX_EVERY.as_secs()
                    ));
                }
                d
            }
        };
        let budget_bytes_per_min = match &r.budget {
            Some(v) => budget(v)?,
            None => crate::budget::default_budget(&method, None).min(MAX_BUDGET),
        };
        let below = r
            .below
            .as_ref()
            .map(|v| threshold("below", &metric, v))
            .transpose()?;
        let exceeds = r
            .exceeds
            .as_ref()
            .map(|v| threshold("exceeds", &metric, v))
            .transpose()?;
        match (mode, below.is_some() || exceeds.is_some()) {
            (Mode::Event, false) => return bad("an event query needs `below` or `exceeds`"),
            (Mode::Once | Mode::Periodic, true) => {
                return bad("`below` and `exceeds` belong to event queries (mode \"event\")")
            }
            _ => {}
        }
        Ok(QuerySpec {
            id,
            owner,
            created_ns: now_ns,
            peer,
            mode,
            method,
            metric,
            every_s: every.as_secs_f64(),
            budget_bytes_per_min,
            below,
            exceeds,
        })
    }

    pub fn every(&self) -> Duration {
        Duration::from_secs_f64(self.every_s.clamp(0.001, MAX_EVERY.as_secs_f64()))
    }

    /// The schedule the query runs as.
    pub fn schedule(&self) -> crate::config::PathSchedule {
        crate::config::PathSchedule {
            peer: self.peer,
            method: self.method.clone(),
            every: self.every(),
            budget: Some(self.budget_bytes_per_min),
            // A query's own budget bounds it; the tracking ceiling is for scheduled paths.
            ceiling: None,
        }
    }

    pub fn conditions(&self) -> crate::watch::Conditions {
        crate::watch::Conditions {
            below: self.below,
            exceeds: self.exceeds,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> Result<QuerySpec, String> {
        let r: QueryRequest = serde_json::from_str(json).map_err(|e| e.to_string())?;
        QuerySpec::from_request(r, "q1".into(), "127.0.0.1".into(), 5)
    }

    #[test]
    fn accepts_the_three_modes() {
        let q = req(r#"{"peer":"198.18.3.2"}"#).unwrap();
        assert_eq!(
            (q.mode, q.peer.port(), q.method.as_str()),
            (Mode::Once, 7240, "auto")
        );
        assert_eq!(q.metric, "avail_bw");
        assert!(q.budget_bytes_per_min >= crate::budget::FLOOR);
        let q = req(r#"{"peer":"10.0.0.1:9000","mode":"periodic","every":"30s","budget":"1mb"}"#)
            .unwrap();
        assert_eq!((q.every_s, q.budget_bytes_per_min), (30.0, 1024 * 1024));
        let q = req(r#"{"peer":"10.0.0.1","mode":"event","every":"5s","below":"10mbit"}"#).unwrap();
        assert_eq!(q.below, Some(10e6));
        let q = req(
            r#"{"peer":"10.0.0.1","mode":"event","every":"5s","metric":"jitter","exceeds":"2ms"}"#,
        )
        .unwrap();
        assert_eq!(q.exceeds, Some(0.002));
    }

    #[test]
    fn refusals_say_why() {
        for (body, why) in [
            (
                r#"{"peer":"10.0.0.1","mode":"event","every":"5s","below":"-5mbit"}"#,
                "below",
            ),
            (
                r#"{"peer":"10.0.0.1","mode":"event","every":"5s","below":-5}"#,
                "not negative",
            ),
            (
                r#"{"peer":"10.0.0.1","budget":-1}"#,
                "positive whole number",
            ),
            (r#"{"peer":"10.0.0.1","budget":"0kb"}"#, "budget"),
            (
                r#"{"peer":"10.0.0.1","budget":999999999999}"#,
                "above the most",
            ),
            (
                r#"{"peer":"10.0.0.1","metric":"goodput"}"#,
                "unknown metric",
            ),
            (r#"{"peer":"10.0.0.1","method":"magic"}"#, "method"),
            (r#"{"peer":"10.0.0.1","mode":"sometimes"}"#, "unknown mode"),
            (
                r#"{"peer":"10.0.0.1","mode":"periodic","every":"1ms"}"#,
                "out of range",
            ),
            (
                r#"{"peer":"10.0.0.1","mode":"periodic","every":"48h"}"#,
                "out of range",
            ),
            (r#"{"peer":"10.0.0.1","mode":"periodic"}"#, "needs `every`"),
            (
                r#"{"peer":"10.0.0.1","mode":"event","every":"5s"}"#,
                "needs `below` or `exceeds`",
            ),
            (r#"{"peer":"10.0.0.1","below":"5mbit"}"#, "belong to event"),
            (r#"{"peer":"0.0.0.0"}"#, "cannot be reached"),
            (r#"{"peer":"224.0.0.1"}"#, "cannot be reached"),
            (r#"{"peer":"255.255.255.255"}"#, "cannot be reached"),
            (r#"{"peer":"10.0.0.1:0"}"#, "cannot be reached"),
            (r#"{"peer":"agent.example"}"#, "not an IP"),
            (
                r#"{"peer":"10.0.0.1","metric":"episode_duration"}"#,
                "does not measure",
            ),
            (r#"{"peer":"10.0.0.1","colour":"red"}"#, "unknown field"),
        ] {
            let e = req(body).unwrap_err();
            assert!(e.contains(why), "{body}: {e}");
        }
    }
}

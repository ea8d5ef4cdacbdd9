//! `[map]`: Netmapper on a schedule. One agent (this one) is the coordinator: it maps the
//! paths from itself to the listed agents every `every`, within `budget` bytes a map, keeps
//! the latest map for `GET /v1/map` and the dashboard. How this grows to many agents is in
//! `docs/map.md`.
//!
//! Each map is kept in the store (the newest [`mgrp_store::MAPS_KEPT`] per coordinator) and
//! copied to the archive when one is configured, so a restarted agent serves its last map at
//! once and maps again only when that one is `every` old; a PostgreSQL store or archive that
//! many coordinators report to answers `GET /v1/maps` with the newest map of each.
//!
//! ```toml
//! [map]
//! name = "agent-a"       # the coordinator's name in the store; default the host name
//! agents = ["198.18.1.2", "198.18.2.2:7240"]
//! every = "1h"           # 1m..=7d
//! budget = "200MB"       # TCP flows and probes of one map
//! max_parallel = 8       # most flows run together
//! pairwise = false       # also map between the listed agents (each relays for this one)
//! ```

use crate::hub::Hub;
use mgrp_engine::auth::Key;
use mgrp_engine::pacer::Pacer;
use mgrp_map::netmap::{AgentsConnector, MapConfig};
use mgrp_map::{BottleneckConfig, PlannerConfig, TraceConfig};
use mgrp_store::StoredMap;
use mgrp_traffic::units::{parse_bytes, parse_duration};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMap {
    name: Option<String>,
    agents: Vec<String>,
    every: Option<String>,
    budget: Option<String>,
    max_parallel: Option<i64>,
    pairwise: Option<bool>,
}

/// The checked `[map]` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapSchedule {
    /// Who made the map, as the store keys it.
    pub name: String,
    pub agents: Vec<SocketAddr>,
    #[serde(rename = "every_s", serialize_with = "secs")]
    pub every: Duration,
    pub budget_bytes: u64,
    pub max_parallel: usize,
    /// Map the paths between the listed agents too (they run them for this one as relays).
    pub pairwise: bool,
}

/// Most agents one coordinator maps to.
pub const MAX_AGENTS: usize = 64;

pub(crate) fn parse(raw: RawMap) -> Result<MapSchedule, String> {
    if raw.agents.is_empty() || raw.agents.len() > MAX_AGENTS {
        return Err(format!("agents must list 1..={MAX_AGENTS} agents"));
    }
    let mut agents = Vec::new();
    for a in &raw.agents {
        let p = mgrp_engine::api::parse_peer(a).map_err(|e| format!("agent {a:?}: {e}"))?;
        if agents.contains(&p) {
            return Err(format!("agent {p} is listed twice"));
        }
        agents.push(p);
    }
    let every =
        parse_duration(raw.every.as_deref().unwrap_or("1h")).map_err(|e| format!("every: {e}"))?;
    if every < Duration::from_secs(60) || every > Duration::from_secs(7 * 86_400) {
        return Err("every must be 1m..=7d".into());
    }
    let budget_bytes = parse_bytes(raw.budget.as_deref().unwrap_or("200MB"))
        .map_err(|e| format!("budget: {e}"))?;
    if budget_bytes < mgrp_map::netmap::MIN_FLOW_BUDGET {
        return Err("budget must be at least 1MB".into());
    }
    let max_parallel = raw.max_parallel.unwrap_or(8);
    if !(1..=64).contains(&max_parallel) {
        return Err(format!("max_parallel must be 1..=64, got {max_parallel}"));
    }
    let name = match raw.name {
        Some(n) => n,
        None => host_name(),
    };
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
        return Err(format!(
            "name must be 1..=64 printable characters, got {name:?}"
        ));
    }
    Ok(MapSchedule {
        name,
        agents,
        every,
        budget_bytes,
        max_parallel: max_parallel as usize,
        pairwise: raw.pairwise.unwrap_or(false),
    })
}

/// The kernel's host name ("mgrp" if it cannot be read: the name only keys the store).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "mgrp".into())
}

impl MapSchedule {
    /// The paths and who sends on each: this host (source 0) to every agent, and with
    /// `pairwise` every agent to every other, relayed by the sending agent.
    pub fn sources(&self) -> (Vec<(usize, SocketAddr)>, Vec<Option<SocketAddr>>) {
        if self.pairwise {
            mgrp_map::pairwise(&self.agents)
        } else {
            (self.agents.iter().map(|a| (0, *a)).collect(), vec![None])
        }
    }

    pub fn map_config(&self) -> MapConfig {
        MapConfig {
            pairs: self.sources().0,
            trace: TraceConfig::default(),
            bottleneck: BottleneckConfig::default(),
            planner: PlannerConfig {
                max_parallel: self.max_parallel,
                ..Default::default()
            },
            budget_bytes: self.budget_bytes,
            warmup: Duration::from_millis(1500),
        }
    }
}

/// What `GET /v1/map` serves: the schedule, the latest map, and the last error.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MapState {
    pub schedule: Option<MapSchedule>,
    pub running: bool,
    pub maps_done: u64,
    pub last_error: Option<String>,
    /// The map shown was read from the store at start (made before this run).
    pub restored: bool,
    #[serde(serialize_with = "arc_map")]
    pub map: Option<Arc<mgrp_map::MapReport>>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn arc_map<S: serde::Serializer>(
    m: &Option<Arc<mgrp_map::MapReport>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    m.as_deref().serialize(s)
}

/// The newest map `name` made, from the store (none, or unreadable: map anew).
fn restore(hub: &Hub, name: &str) -> Option<mgrp_map::MapReport> {
    let maps = hub.store.lock().ok()?.latest_maps().ok()?;
    let m = maps.into_iter().find(|m| m.coordinator == name)?;
    match serde_json::from_str(&m.json) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!(
                "mgrp agent: map: the stored map of {name} is unreadable ({e}); mapping anew"
            );
            None
        }
    }
}

/// Store a finished map and queue a copy for the archive; the error is the map's to show.
fn keep(hub: &Hub, name: &str, rep: &mgrp_map::MapReport) -> Result<(), String> {
    let stored = StoredMap {
        coordinator: name.to_string(),
        t_ns: rep.at_ms.saturating_mul(1_000_000),
        json: serde_json::to_string(rep).map_err(|e| format!("storing the map: {e}"))?,
    };
    if let Some(a) = hub.archive.read().ok().and_then(|a| a.clone()) {
        a.push_map(stored.clone());
    }
    hub.store
        .lock()
        .map_err(|_| "storing the map: store poisoned".to_string())?
        .put_map(&stored)
        .map_err(|e| format!("storing the map: {e}"))
}

/// The mapping thread; stopped (between steps at most one flow's time later) on drop.
pub struct MapRun {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

pub fn start(s: &MapSchedule, key: Key, hub: Arc<Hub>) -> std::io::Result<MapRun> {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let s = s.clone();
    let restored = restore(&hub, &s.name);
    let first_wait = restored
        .as_ref()
        .map(|r| {
            let age = Duration::from_millis(mgrp_map::netmap::now_ms().saturating_sub(r.at_ms));
            s.every.saturating_sub(age)
        })
        .unwrap_or_default();
    hub.update_map(|m| {
        m.schedule = Some(s.clone());
        m.restored = restored.is_some();
        if restored.is_some() {
            m.map = restored.map(Arc::new);
        }
    });
    let thread = std::thread::Builder::new()
        .name("netmapper".into())
        .spawn(move || {
            let pacer = match Pacer::spawn() {
                Ok(p) => Arc::new(p),
                Err(e) => {
                    hub.update_map(|m| m.last_error = Some(format!("pacer: {e}")));
                    return;
                }
            };
            let conn = AgentsConnector {
                key,
                pacer,
                sources: s.sources().1,
            };
            let cfg = s.map_config();
            let wait_from = Instant::now();
            while !st.load(Ordering::Relaxed) && wait_from.elapsed() < first_wait {
                std::thread::sleep(Duration::from_millis(200));
            }
            while !st.load(Ordering::Relaxed) {
                let began = Instant::now();
                hub.update_map(|m| m.running = true);
                let r = mgrp_map::map(&conn, &cfg, || st.load(Ordering::Relaxed), |_| {});
                let kept = r.as_ref().ok().map(|rep| keep(&hub, &s.name, rep));
                hub.update_map(|m| {
                    m.running = false;
                    match r {
                        Ok(rep) => {
                            m.maps_done += 1;
                            m.restored = false;
                            m.last_error = kept.and_then(Result::err);
                            m.map = Some(Arc::new(rep));
                        }
                        Err(e) => m.last_error = Some(e.to_string()),
                    }
                });
                while !st.load(Ordering::Relaxed) && began.elapsed() < s.every {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        })?;
    Ok(MapRun {
        stop,
        thread: Some(thread),
    })
}

impl Drop for MapRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> RawMap {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn defaults_and_bad_settings() {
        let m = parse(raw("agents = [\"198.18.1.2\"]")).unwrap();
        assert_eq!(m.agents[0].port(), 7240);
        assert!(!m.name.is_empty(), "named after the host");
        assert_eq!(m.map_config().pairs.len(), 1, "from this host only");
        let p = parse(raw(
            "agents = [\"198.18.1.2\", \"198.18.2.2\", \"198.18.3.2\"]\npairwise = true",
        ))
        .unwrap();
        let (pairs, sources) = p.sources();
        assert_eq!((pairs.len(), sources.len()), (3 + 3 * 2, 4));
        assert!(
            pairs.iter().all(|&(s, d)| sources[s] != Some(d)),
            "no path to itself"
        );
        assert_eq!(
            (m.every, m.budget_bytes, m.max_parallel),
            (Duration::from_secs(3600), 200 << 20, 8)
        );
        for (t, why) in [
            ("agents = []", "agents must list"),
            ("agents = [\"nope\"]", "agent \"nope\""),
            ("agents = [\"10.0.0.1\", \"10.0.0.1:7240\"]", "listed twice"),
            ("agents = [\"10.0.0.1\"]\nevery = \"1s\"", "every must be"),
            ("agents = [\"10.0.0.1\"]\nbudget = \"1kb\"", "at least 1MB"),
            ("agents = [\"10.0.0.1\"]\nmax_parallel = 0", "max_parallel"),
            ("agents = [\"10.0.0.1\"]\nname = \"\"", "name must be"),
            ("agents = [\"10.0.0.1\"]\nname = \"a\\nb\"", "name must be"),
        ] {
            let e = parse(raw(t)).unwrap_err();
            assert!(e.contains(why), "{t}: {e}");
        }
    }

    /// What `keep` stores, `restore` reads back; a document that no longer parses (an older
    /// agent's, a hand edit) is passed over, not fatal.
    #[test]
    fn kept_maps_are_restored_and_bad_ones_skipped() {
        use mgrp_map::graph::{Graph, PathObs};
        use mgrp_map::planner::Planner;
        let ip = |s: &str| s.parse().unwrap();
        let obs = PathObs {
            src: ip("10.0.0.1"),
            dst: ip("10.0.1.2"),
            hops: vec![Some(ip("10.0.0.2")), Some(ip("10.0.1.2"))],
            reached: true,
            error: None,
            base_ns: vec![Some(100_000), Some(2_000_000)],
        };
        let pl = Planner::new(Graph::build(&[obs]), PlannerConfig::default()).unwrap();
        let rep = mgrp_map::MapReport {
            stats: pl.stats(),
            steps: vec![],
            graph: pl.into_graph(),
            probe_bytes: 1,
            flow_bytes: 2,
            budget_bytes: 3,
            unfinished: None,
            seconds: 1.0,
            at_ms: 1_795_000_000_000,
        };
        let store = mgrp_store::Store::in_memory(Duration::from_secs(60)).unwrap();
        let hub = Hub::new(Box::new(store), None);
        assert!(restore(&hub, "a").is_none());
        keep(&hub, "a", &rep).unwrap();
        let back = restore(&hub, "a").expect("restored");
        assert_eq!((back.at_ms, back.graph), (rep.at_ms, rep.graph));
        assert!(restore(&hub, "b").is_none(), "another coordinator's name");
        hub.store
            .lock()
            .unwrap()
            .put_map(&StoredMap {
                coordinator: "a".into(),
                t_ns: u64::MAX >> 2,
                json: "{\"not\": \"a map\"}".into(),
            })
            .unwrap();
        assert!(restore(&hub, "a").is_none(), "the newest is unreadable");
    }
}

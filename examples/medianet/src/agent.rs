//! The agent's estimates, read over its public HTTP API as any application would: the newest
//! stored one (`GET /v1/estimate`) when the subscription (re)opens, then every new one from the
//! Server-Sent Events stream (`GET /v1/events`). Each becomes an [`Estimate`] for the global
//! scheduler. Rough estimates (`final: false`, e.g. `auto:chirp` before its refinement) wait
//! for their refinement; active estimates count the streams' own traffic as load
//! (`includes_own`), passive (Wren) ones are taken as they are.

use crate::sender::{Estimate, EstimateTx};
use crate::Stop;
use serde::Deserialize;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A line of the event stream longer than this is refused (the stream reopens).
const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct AgentSource {
    /// The agent's HTTP API.
    pub api: SocketAddr,
    /// Which path: `peer=IP` (a scheduled peer) or `path=SRC->DST` (e.g. Wren's flow).
    pub selector: String,
    pub token: Option<String>,
}

#[derive(Debug, Default)]
pub struct AgentCounts {
    pub connects: AtomicU64,
    pub events: AtomicU64,
    pub estimates: AtomicU64,
    pub skipped: AtomicU64,
    pub errors: AtomicU64,
    /// On-demand measurement requests made ([`keep_measuring`]).
    pub requests: AtomicU64,
}

/// The fields of the agent's record used here.
#[derive(Debug, Deserialize)]
pub struct Record {
    pub value: f64,
    pub source: String,
    #[serde(rename = "final", default = "yes")]
    pub final_: bool,
    #[serde(default)]
    pub metric: Option<String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
struct Event {
    record: Record,
}

/// The estimate a record gives the scheduler, if any.
pub fn estimate_of(r: &Record) -> Option<Estimate> {
    if r.metric.as_deref().is_some_and(|m| m != "avail_bw") || !r.value.is_finite() {
        return None;
    }
    match r.source.as_str() {
        "active" if r.final_ => Some(Estimate {
            bps: r.value,
            includes_own: true,
        }),
        "passive" => Some(Estimate {
            bps: r.value,
            includes_own: false,
        }),
        _ => None,
    }
}

/// The `data:` JSON of one SSE event (an `estimate`, `rise`, `fall`, ... event).
pub fn estimate_of_event(data: &str) -> Option<Estimate> {
    serde_json::from_str::<Event>(data)
        .ok()
        .and_then(|e| estimate_of(&e.record))
}

/// Follow the agent until `stop` (or the sender goes away), reopening the stream after an
/// error (once a second). Runs in its own thread; returns when stopped.
pub fn follow(src: AgentSource, tx: EstimateTx, stop: Stop, counts: Arc<AgentCounts>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(3)))
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let base = format!("http://{}", src.api);
    let auth = src.token.as_ref().map(|t| format!("Bearer {t}"));
    let get = |path: &str| {
        let mut r = agent.get(format!("{base}{path}"));
        if let Some(a) = &auth {
            r = r.header("Authorization", a);
        }
        r.call()
    };
    while !stop.is_set() {
        counts.connects.fetch_add(1, Ordering::Relaxed);
        // The newest stored estimate first (404 before the first one: nothing to learn).
        if let Ok(mut r) = get(&format!("/v1/estimate?{}", src.selector)) {
            if r.status() == 200 {
                let rec = r
                    .body_mut()
                    .read_to_string()
                    .ok()
                    .and_then(|b| serde_json::from_str::<Record>(&b).ok());
                if let Some(rec) = rec {
                    match estimate_of(&rec) {
                        Some(e) if !tx.send(e) => return,
                        Some(_) => {
                            counts.estimates.fetch_add(1, Ordering::Relaxed);
                        }
                        None => {
                            counts.skipped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        match get(&format!("/v1/events?{}", src.selector)) {
            Ok(mut r) if r.status() == 200 => {
                let reader = BufReader::new(r.body_mut().as_reader());
                if !read_events(reader, &tx, &stop, &counts) {
                    return;
                }
            }
            _ => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Reopen after a second (bounded rate), unless stopped.
        for _ in 0..10 {
            if stop.is_set() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Keep the agent measuring back to back, as the seed's GS kept pathload running: ask for an
/// estimate no older than a second (`/v1/estimate?max_age=1s&wait=60s`), which rings the path's
/// schedule when the newest is older, and ask again a second after it answers (the answer
/// is then no longer fresh). The answers also arrive as events, so they are not fed from
/// here. At most one request at a time. Returns when stopped.
pub fn keep_measuring(src: AgentSource, stop: Stop, counts: Arc<AgentCounts>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(3)))
        .timeout_global(Some(Duration::from_secs(65)))
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let url = format!(
        "http://{}/v1/estimate?{}&max_age=1s&wait=60s",
        src.api, src.selector
    );
    while !stop.is_set() {
        let mut r = agent.get(&url);
        if let Some(t) = &src.token {
            r = r.header("Authorization", format!("Bearer {t}"));
        }
        let ok = r.call().is_ok_and(|mut r| {
            let _ = r.body_mut().read_to_string();
            r.status() == 200
        });
        counts.requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            counts.errors.fetch_add(1, Ordering::Relaxed);
        }
        // The answer is fresh for up to a second: asking again sooner would be answered
        // from the store at once, over and over.
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Read events until the stream ends or fails; false when the sender has gone.
fn read_events(
    mut reader: impl BufRead,
    tx: &EstimateTx,
    stop: &Stop,
    counts: &AgentCounts,
) -> bool {
    let mut line = String::new();
    loop {
        if stop.is_set() {
            return true;
        }
        line.clear();
        match (&mut reader).take(MAX_LINE as u64 + 1).read_line(&mut line) {
            Ok(0) => return true,
            Ok(n) if n > MAX_LINE => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Ok(_) => {}
            Err(_) => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            continue;
        };
        counts.events.fetch_add(1, Ordering::Relaxed);
        match estimate_of_event(data.trim_start()) {
            Some(e) => {
                if !tx.send(e) {
                    return false;
                }
                counts.estimates.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                counts.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

use std::io::Read as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_estimates_by_source_and_finality() {
        let ev = |source: &str, fin: bool| {
            format!(
                r#"{{"kind":"estimate","path":"a->b","metric":"avail_bw","value":5e6,
                "record":{{"path":"a->b","metric":"avail_bw","t_ns":1,"value":5e6,"low":4e6,
                "high":6e6,"method":"auto:slops","source":"{source}","final":{fin}}}}}"#
            )
        };
        assert_eq!(
            estimate_of_event(&ev("active", true)),
            Some(Estimate {
                bps: 5e6,
                includes_own: true
            })
        );
        assert_eq!(estimate_of_event(&ev("active", false)), None, "rough");
        assert_eq!(
            estimate_of_event(&ev("passive", true)).map(|e| e.includes_own),
            Some(false)
        );
        assert_eq!(estimate_of_event(&ev("testbed", true)), None);
        assert_eq!(estimate_of_event("{not json"), None);
    }
}

//! The thin I/O around the chooser's estimates: polls the local agent's HTTP API for new
//! available-bandwidth records of each replica's path (`/v1/records`), and asks it to measure a
//! path that has gone quiet (`/v1/estimate?max_age=`), one request at a time per path.

use crate::choice::{Chooser, Source};
use crate::http_client::{get, Reply};
use crate::{mono_ns, Shared};
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The fields of the agent's record the proxy reads.
#[derive(Debug, Deserialize)]
pub struct AgentRecord {
    pub t_ns: u64,
    pub value: f64,
    pub high: f64,
    pub source: String,
    #[serde(default)]
    pub elapsed_s: f64,
    #[serde(rename = "final")]
    pub final_: bool,
}

/// Feed `records` of `replica`'s path into `c`; returns the newest time seen. A rough active
/// estimate (not final) waits for its refinement; sources other than active and passive are
/// not estimates of the proxy's paths.
pub fn feed(
    c: &mut Chooser,
    replica: usize,
    records: &[AgentRecord],
    now_mono: u64,
    now_real: u64,
) -> u64 {
    let mut newest = 0;
    for r in records {
        newest = newest.max(r.t_ns);
        let source = match r.source.as_str() {
            "passive" => Source::Passive,
            "active" if r.final_ => Source::Active,
            _ => continue,
        };
        let at = now_mono.saturating_sub(now_real.saturating_sub(r.t_ns));
        let window = std::time::Duration::try_from_secs_f64(r.elapsed_s).unwrap_or_default();
        c.handle_estimate(replica, source, at, window, r.value, r.high);
    }
    newest
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Poll for ever (until the runtime stops): every `every`, each replica's new records.
pub(crate) async fn poll_loop(shared: Arc<Shared>, agent: SocketAddr, every: Duration) {
    let n = shared.replicas.len();
    // Ask for the last minute at first, then only what is newer than the newest seen.
    let mut since = vec![realtime_ns().saturating_sub(60_000_000_000); n];
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (i, since) in since.iter_mut().enumerate() {
            let peer = shared.replicas[i].peer.clone();
            let uri = format!(
                "/v1/records?peer={peer}&metric=avail_bw&from_ns={}&limit=200",
                *since + 1
            );
            let reply = get(
                agent,
                &uri,
                shared.token.as_deref(),
                every.max(Duration::from_secs(1)),
            )
            .await;
            let now = mono_ns();
            let mut c = shared.chooser.lock().unwrap_or_else(|e| e.into_inner());
            match reply {
                Ok(Reply { status: 200, body }) => {
                    match serde_json::from_slice::<Vec<AgentRecord>>(&body) {
                        Ok(v) => {
                            c.handle_agent_ok(now);
                            let newest = feed(&mut c, i, &v, now, realtime_ns());
                            *since = (*since).max(newest);
                        }
                        Err(e) => c.handle_agent_error(now, format!("agent's records: {e}")),
                    }
                }
                // No estimate of this path yet: the agent answers, nothing to learn.
                Ok(Reply { status: 404, .. }) => c.handle_agent_ok(now),
                Ok(Reply { status, body }) => c.handle_agent_error(
                    now,
                    format!(
                        "agent answered {status}: {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    ),
                ),
                Err(e) => c.handle_agent_error(now, format!("agent {agent}: {e}")),
            }
            let up = c.agent_up(now);
            drop(c);
            shared.note_agent(up);
        }
        // Quiet paths: ask for a measurement (answers arrive as records).
        loop {
            let Some(i) = shared
                .chooser
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .poll_probe(mono_ns())
            else {
                break;
            };
            let sh = shared.clone();
            tokio::spawn(async move {
                let uri = format!(
                    "/v1/estimate?peer={}&max_age=1s&wait=10s",
                    sh.replicas[i].peer
                );
                let _ = get(agent, &uri, sh.token.as_deref(), Duration::from_secs(12)).await;
                sh.counters
                    .probes_asked
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::ChoiceConfig;

    #[test]
    fn records_feed_the_chooser_by_source_and_age() {
        let body = br#"[
            {"path":"a->b","metric":"avail_bw","t_ns":9000000000,"value":5e6,"low":4e6,"high":6e6,
             "method":"auto:chirp","source":"active","probe_bytes":1,"trains":1,"confidence":0.5,
             "elapsed_s":1.0,"final":false},
            {"path":"a->b","metric":"avail_bw","t_ns":9500000000,"value":7e6,"low":6e6,"high":8e6,
             "method":"auto:slops","source":"active","probe_bytes":1,"trains":1,"confidence":0.9,
             "elapsed_s":1.0,"final":true},
            {"path":"a->b","metric":"avail_bw","t_ns":9900000000,"value":9e6,"low":9e6,"high":9e6,
             "method":"wren","source":"passive","probe_bytes":0,"trains":3,"confidence":0.9,
             "elapsed_s":1.0,"final":true}
        ]"#;
        let v: Vec<AgentRecord> = serde_json::from_slice(body).unwrap();
        let mut c = Chooser::new(ChoiceConfig::default(), 1);
        // Realtime 10 s is monotonic 100 s here.
        let newest = feed(&mut c, 0, &v, 100_000_000_000, 10_000_000_000);
        assert_eq!(newest, 9_900_000_000);
        let p = &c.status(100_000_000_000).paths[0];
        assert_eq!(p.active_bps, Some(7e6), "the rough estimate is skipped");
        assert_eq!(p.passive_bps, Some(9e6));
        assert!((p.passive_age_s.unwrap() - 0.1).abs() < 1e-9);
        assert!((p.active_age_s.unwrap() - 0.5).abs() < 1e-9);
    }
}

//! `mgrp testbed run --dashboard`: the estimation service on the testbed, watched in a browser.
//! An agent answers in rcv; the service keeps the path snd→rcv fresh from inside snd; its HTTP API
//! and dashboard listen in the caller's namespace (a browser on this host reaches them), and the
//! testbed's ground truth is stored beside the estimates as metric `avail_bw_truth`.

use crate::rig::agent_at_rcv;
use crate::{Error, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::daemon::Agent;
use mgrp_estimate::methods::Method;
use mgrp_service::config::{PathSchedule, ServiceConfig};
use mgrp_service::http::Http;
use mgrp_service::record::{scalar, Series};
use mgrp_service::{Hub, Service};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Role, Testbed};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub struct DashboardRun {
    http: Http,
    hub: Arc<Hub>,
    service: Option<Service>,
    _agent: Agent,
}

impl DashboardRun {
    pub fn start(tb: &Testbed, listen: SocketAddr, method: Method) -> Result<DashboardRun> {
        let key = Key::random();
        let (agent, peer) = agent_at_rcv(tb, &key)?;
        let cfg = ServiceConfig {
            paths: vec![PathSchedule {
                peer,
                method: method.name().into(),
                every: Duration::from_secs(1),
                budget: Some(60_000_000),
                ceiling: None,
            }],
            ..ServiceConfig::default()
        };
        let service = spawn_in(&tb.ns(Role::Snd), "service", move || {
            Service::start(&cfg, key).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
        })?
        .join()
        .map_err(|_| Error::Worker("service thread panicked".into()))??;
        let hub = service.hub();
        let http = Http::start(listen, hub.clone()).map_err(|e| Error::Worker(e.to_string()))?;
        Ok(DashboardRun {
            http,
            hub,
            service: Some(service),
            _agent: agent,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.http.local_addr())
    }

    /// Store the ground truth of a window (A at the bottleneck) under the schedule's path
    /// (nothing before the schedule has named it).
    pub fn truth(&self, end_ns_realtime: u64, window_s: f64, avail_bps: f64) -> Result<()> {
        let Some(path) = self.hub.paths().first().and_then(|p| p.name()) else {
            return Ok(());
        };
        let at = Series {
            path: &path,
            metric: "avail_bw_truth",
            source: "testbed",
            t_ns: end_ns_realtime,
        };
        let r = scalar(
            at,
            "bottleneck counters",
            avail_bps,
            (avail_bps, avail_bps),
            window_s,
        );
        self.hub
            .publish(&[r])
            .map_err(|e| Error::Worker(format!("storing the ground truth: {e}")))
    }

    /// Stop the schedule (then the HTTP server and the agent, on drop).
    pub fn stop(mut self) -> mgrp_service::CounterSnapshot {
        self.service.take().map(|s| s.stop()).unwrap_or_default()
    }
}

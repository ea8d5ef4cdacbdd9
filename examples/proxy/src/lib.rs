//! An HTTP proxy in front of several replicas of a service that forwards each request to the
//! replica whose path has the most available bandwidth, as the local mgrp agent reports it
//! (seed 004 §7.3): Wren's passive estimates from the proxy's own connections first, an active
//! measurement asked for only when a path has gone quiet, and under 1% of requests diverted to
//! the other replicas to keep their paths fresh. When the agent cannot be reached it keeps
//! serving (the last choice, or round robin) and says so: a log line, `x-mgrp-choice:
//! agent_down` on every answer, and `/proxy/status`.
//!
//! [`choice`] is the rule (sans-IO); [`agent`] polls the agent; [`server`] forwards.

pub mod agent;
pub mod choice;
mod http_client;
pub mod origin;
pub mod server;

use choice::{ChoiceConfig, Chooser, Status};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error(transparent)]
    Io(std::io::Error),
    #[error("{0}")]
    Config(String),
}

/// One replica: where its HTTP service listens, and the peer the agent knows its path by.
#[derive(Debug, Clone)]
pub struct Replica {
    pub addr: SocketAddr,
    /// The agent's peer for this path (`IP` or `IP:PORT` as scheduled); default: the address's IP.
    pub peer: String,
}

impl Replica {
    pub fn new(addr: SocketAddr) -> Replica {
        Replica {
            addr,
            peer: addr.ip().to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    pub replicas: Vec<Replica>,
    /// The local agent's HTTP API.
    pub agent: SocketAddr,
    /// Sent as a bearer token when the agent is not on loopback.
    pub token: Option<String>,
    pub choice: ChoiceConfig,
    /// How often the agent is asked for new estimates.
    pub poll_every: Duration,
    pub max_connections: usize,
    pub max_body: usize,
    pub upstream_timeout: Duration,
    /// Idle connections kept open to each replica.
    pub max_idle_per_replica: usize,
    /// Say on stderr when the agent becomes unreachable and when it is back.
    pub log: bool,
}

impl ProxyConfig {
    pub fn new(listen: SocketAddr, replicas: Vec<Replica>, agent: SocketAddr) -> ProxyConfig {
        ProxyConfig {
            listen,
            replicas,
            agent,
            token: None,
            choice: ChoiceConfig::default(),
            poll_every: Duration::from_millis(250),
            max_connections: 256,
            max_body: 16 << 20,
            upstream_timeout: Duration::from_secs(30),
            max_idle_per_replica: 32,
            log: true,
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Counters {
    pub connections: AtomicU64,
    pub forwarded: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub too_large: AtomicU64,
    pub bad_requests: AtomicU64,
    pub accept_errors: AtomicU64,
    pub probes_asked: AtomicU64,
}

/// What `/proxy/status` answers.
#[derive(Debug, Serialize)]
pub struct ProxyStatus {
    pub replicas: Vec<String>,
    #[serde(flatten)]
    pub choice: Status,
    pub counters: CountersView,
}

#[derive(Debug, Serialize)]
pub struct CountersView {
    pub connections: u64,
    pub forwarded: u64,
    pub upstream_errors: u64,
    pub too_large: u64,
    pub bad_requests: u64,
    pub accept_errors: u64,
    pub probes_asked: u64,
}

pub(crate) struct Shared {
    pub replicas: Vec<Replica>,
    pub token: Option<String>,
    pub chooser: Mutex<Chooser>,
    pub counters: Counters,
    pub upstream: server::Upstream,
    pub max_body: usize,
    pub upstream_timeout: Duration,
    agent_was_up: AtomicBool,
    log: bool,
}

impl Shared {
    pub fn status(&self) -> ProxyStatus {
        let c = &self.counters;
        ProxyStatus {
            replicas: self.replicas.iter().map(|r| r.addr.to_string()).collect(),
            choice: self
                .chooser
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .status(mono_ns()),
            counters: CountersView {
                connections: c.connections.load(Relaxed),
                forwarded: c.forwarded.load(Relaxed),
                upstream_errors: c.upstream_errors.load(Relaxed),
                too_large: c.too_large.load(Relaxed),
                bad_requests: c.bad_requests.load(Relaxed),
                accept_errors: c.accept_errors.load(Relaxed),
                probes_asked: c.probes_asked.load(Relaxed),
            },
        }
    }

    /// Log the agent's comings and goings once each.
    pub fn note_agent(&self, up: bool) {
        if self.agent_was_up.swap(up, Relaxed) != up && self.log {
            if up {
                eprintln!("mgrp-proxy: the agent answers again; choosing by its estimates");
            } else {
                let why = self.status().choice.agent_error.unwrap_or_default();
                eprintln!("mgrp-proxy: the agent is unreachable ({why}); serving on the last choice (round robin before any)");
            }
        }
    }
}

/// Monotonic nanoseconds since the first call (the chooser's clock).
pub fn mono_ns() -> u64 {
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1_000_000_000_000
}

/// A running proxy; dropping it stops it.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Listen on `cfg.listen` in the calling thread's network namespace; its runtime's threads
    /// connect to the replicas and the agent from that namespace too.
    pub fn start(cfg: ProxyConfig) -> Result<Proxy, Error> {
        if cfg.replicas.is_empty() {
            return Err(Error::Config("at least one replica".into()));
        }
        if cfg.max_connections == 0 || cfg.max_body == 0 {
            return Err(Error::Config(
                "max_connections and max_body must be positive".into(),
            ));
        }
        let std_listener =
            std::net::TcpListener::bind(cfg.listen).map_err(|e| Error::Bind(cfg.listen, e))?;
        std_listener.set_nonblocking(true).map_err(Error::Io)?;
        let addr = std_listener.local_addr().map_err(Error::Io)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mgrp-proxy")
            .enable_all()
            .build()
            .map_err(Error::Io)?;
        let shared = Arc::new(Shared {
            chooser: Mutex::new(Chooser::new(cfg.choice.clone(), cfg.replicas.len())),
            replicas: cfg.replicas.clone(),
            token: cfg.token.clone(),
            counters: Counters::default(),
            upstream: {
                let _g = rt.enter();
                server::upstream(cfg.max_idle_per_replica)
            },
            max_body: cfg.max_body,
            upstream_timeout: cfg.upstream_timeout,
            agent_was_up: AtomicBool::new(true),
            log: cfg.log,
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mgrp-proxy-main".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    tokio::spawn(agent::poll_loop(sh.clone(), cfg.agent, cfg.poll_every));
                    tokio::select! {
                        _ = rx => {}
                        _ = server::serve(sh, listener, cfg.max_connections) => {}
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(Error::Io)?;
        Ok(Proxy {
            addr,
            shared,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn status(&self) -> ProxyStatus {
        self.shared.status()
    }

    /// Wait until the proxy stops (for the binary).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

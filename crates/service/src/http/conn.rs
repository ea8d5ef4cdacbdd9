//! Connections, bounded: at most `max_connections` at once (beyond, new ones wait in the
//! kernel's accept queue, costing no descriptor), at most `per_source` from one address
//! (beyond, closed at once and counted), and a header-read timeout before anything else — the
//! token check included — so idle sockets cannot hold the API: each is closed after
//! `header_timeout` without a complete request head, also between requests on a kept-alive
//! connection.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower_service::Service;

/// Bounds on the HTTP server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most (each is a file descriptor).
    pub max_connections: usize,
    /// Open connections from one address at most.
    pub per_source: usize,
    /// A connection that has not sent a whole request head this long after it opened (or
    /// after its last answer) is closed.
    pub header_timeout: Duration,
}

impl Default for Limits {
    /// Well inside a 256-descriptor limit; a browser opens about 6 plus one per event stream.
    fn default() -> Limits {
        Limits {
            max_connections: 128,
            per_source: 32,
            header_timeout: Duration::from_secs(5),
        }
    }
}

mgrp_counters::counters! {
    /// What the HTTP server did with connections.
    pub struct ConnCounters => ConnSnapshot {
        /// Connections accepted and served
        accepted,
        /// Connections closed at once: their address had `per_source` open
        refused_per_source,
        /// accept() failures (e.g. out of descriptors), each followed by a short pause
        accept_errors,
    }
}

/// Open connections by source address; an entry leaves when its count drops to zero.
#[derive(Default)]
struct Sources(Mutex<HashMap<IpAddr, usize>>);

/// One open connection's place in [`Sources`].
struct SourceSlot {
    sources: Arc<Sources>,
    ip: IpAddr,
}

impl Sources {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<SourceSlot> {
        let mut m = self.0.lock().ok()?;
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(SourceSlot {
            sources: self.clone(),
            ip,
        })
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.sources.0.lock() {
            if let Some(n) = m.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.ip);
                }
            }
        }
    }
}

/// Serve `app` on `listener` within `limits` until `shutdown` fires; then stop accepting, ask
/// open connections to finish their current request, and return when they have.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    counters: Arc<ConnCounters>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let total = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let sources = Arc::new(Sources::default());
    let (closing_tx, closing) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // A free slot first: until then the kernel holds new connections, not us.
        let permit = tokio::select! {
            p = total.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        // Reap finished tasks so the set stays as small as the open connections.
        while conns.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(_) => {
                // Out of descriptors, or a connection reset before we took it: do not spin.
                counters.bump(&counters.accept_errors, 1);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = sources.take(peer.ip(), limits.per_source) else {
            counters.bump(&counters.refused_per_source, 1);
            continue;
        };
        counters.bump(&counters.accepted, 1);
        let app = app.clone();
        let mut closing = closing.clone();
        conns.spawn(async move {
            let _held = (permit, slot);
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                app.clone().call(req)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = closing_tx.send(true);
    while conns.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_source_slots_are_bounded_and_given_back() {
        let s = Arc::new(Sources::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = s.take(a, 2).unwrap();
        let _s2 = s.take(a, 2).unwrap();
        assert!(s.take(a, 2).is_none(), "a third from one address");
        assert!(s.take(b, 2).is_some(), "another address is not affected");
        drop(s1);
        let _s3 = s.take(a, 2).expect("a slot given back is free again");
        drop((_s2, _s3));
        assert!(
            s.0.lock().unwrap().is_empty(),
            "no entry outlives its connections"
        );
    }
}

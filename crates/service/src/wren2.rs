//! Two-sided Wren, live: for each flow the local capture sees this host send to the peer, ask
//! the peer agent (authenticated control session) to capture the flow's arrivals, merge them
//! with our own send times ([`mgrp_estimate::wren2::LiveMerge`], the offline merge done in
//! rounds) and analyse the result with a second Wren whose estimates carry method `wren2`.
//!
//! One thread per peer capture reads its records into a bounded channel; everything else runs
//! on the caller's capture loop. At most [`MAX_FLOWS`] flows are followed at once; a flow whose
//! capture ended or failed is asked for again after [`RETRY`].

use mgrp_engine::auth::Key;
use mgrp_engine::client::{CaptureEvent, Session};
use mgrp_engine::pacer::Pacer;
use mgrp_estimate::wren::{PassiveEstimate, Segment, Wren, WrenParams};
use mgrp_estimate::wren2::{Arrival, LiveMerge, MergeCounters};
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Flows followed two-sided at once (each holds one of the peer's capture slots).
pub const MAX_FLOWS: usize = 2;
/// A flow whose peer capture ended or failed is asked for again after this.
pub const RETRY: Duration = Duration::from_secs(5);
/// How long one request asks the peer to capture.
pub const CAPTURE_FOR: Duration = Duration::from_secs(300);
/// Batches waiting between a capture thread and the loop.
const CHANNEL: usize = 256;

/// What a peer capture thread hands the loop.
enum Msg {
    Batch(Vec<Arrival>),
    End { dropped: u64 },
    Failed(String),
}

struct Follow {
    merge: LiveMerge,
    rx: Receiver<Msg>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The capture is over (ended or failed) since this time.
    over_since: Option<Instant>,
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TwoSidedCounters {
    /// Peer captures asked for.
    pub requests: u64,
    /// Peer captures that failed or were refused (the last reason is in `last_error`).
    pub failures: u64,
    /// Arrivals the peer did not send (over its limit or lost by its capture ring).
    pub peer_dropped: u64,
    /// Batches dropped because the loop fell behind.
    pub batches_dropped: u64,
    /// Flows not followed because [`MAX_FLOWS`] were.
    pub flows_over_limit: u64,
    pub merge: MergeCounters,
    pub last_error: Option<String>,
}

/// The two-sided analysis of the flows a capture sees this host send to one peer agent.
pub struct TwoSided {
    peer: SocketAddr,
    key: Key,
    pacer: Arc<Pacer>,
    local: Vec<std::net::IpAddr>,
    flows: HashMap<(SocketAddr, SocketAddr), Follow>,
    wren: Wren,
    counters: TwoSidedCounters,
    /// Merge counters of flows no longer followed.
    merged_before: MergeCounters,
    dropped_batches: Arc<std::sync::atomic::AtomicU64>,
}

impl TwoSided {
    /// Follow flows from `local` addresses to the agent at `peer` (its control address).
    pub fn new(
        peer: SocketAddr,
        key: Key,
        pacer: Arc<Pacer>,
        local: Vec<std::net::IpAddr>,
        window_ns: u64,
    ) -> TwoSided {
        TwoSided {
            peer,
            key,
            pacer,
            local,
            flows: HashMap::new(),
            wren: Wren::new(
                WrenParams {
                    window_ns,
                    ..WrenParams::default()
                }
                .two_sided(),
            ),
            counters: TwoSidedCounters::default(),
            merged_before: MergeCounters::default(),
            dropped_batches: Default::default(),
        }
    }

    pub fn counters(&self) -> TwoSidedCounters {
        let mut c = self.counters.clone();
        let mut m = self.merged_before;
        for f in self.flows.values() {
            add(&mut m, f.merge.counters());
        }
        c.merge = m;
        c.batches_dropped = self.dropped_batches.load(Ordering::Relaxed);
        c
    }

    pub fn wren_counters(&self) -> mgrp_estimate::wren::WrenCounters {
        self.wren.counters()
    }

    /// A segment of the local capture.
    pub fn handle_segment(&mut self, s: &Segment) {
        if s.payload == 0 || s.control || s.dst.ip() != self.peer.ip() {
            return;
        }
        if !self.local.contains(&s.src.ip()) {
            return;
        }
        let key = (s.src, s.dst);
        if !self.flows.contains_key(&key) {
            if self.flows.len() >= MAX_FLOWS {
                self.counters.flows_over_limit += 1;
                return;
            }
            let f = self.follow(key);
            self.flows.insert(key, f);
        }
        if let Some(f) = self.flows.get_mut(&key) {
            f.merge.handle_sent(s);
        }
    }

    fn follow(&mut self, (sender, receiver): (SocketAddr, SocketAddr)) -> Follow {
        self.counters.requests += 1;
        let (tx, rx) = sync_channel(CHANNEL);
        let stop = Arc::new(AtomicBool::new(false));
        let (peer, key, pacer, st) = (
            self.peer,
            self.key.clone(),
            self.pacer.clone(),
            stop.clone(),
        );
        let dropped = self.dropped_batches.clone();
        let thread = std::thread::Builder::new()
            .name("wren2-peer".into())
            .spawn(move || {
                let why = match capture(peer, &key, pacer, sender, receiver, &tx, &st, &dropped) {
                    Ok(()) => return,
                    Err(e) => e,
                };
                let _ = tx.send(Msg::Failed(why));
            })
            .ok();
        let over_since = thread.is_none().then(Instant::now);
        if thread.is_none() {
            self.fail("cannot start a capture thread".into());
        }
        Follow {
            merge: LiveMerge::new(sender, receiver),
            rx,
            stop,
            thread,
            over_since,
        }
    }

    fn fail(&mut self, why: String) {
        self.counters.failures += 1;
        if self.counters.last_error.as_deref() != Some(&why) {
            eprintln!("mgrp agent: two-sided Wren with {}: {why}", self.peer);
        }
        self.counters.last_error = Some(why);
    }

    /// Take in the peers' records, merge what is due and analyse it: the `wren2` estimates of
    /// windows now complete. `now_ns` is the capture clock (wall-clock ns); `u64::MAX` ends.
    pub fn poll(&mut self, now_ns: u64) -> Vec<PassiveEstimate> {
        let mut failures = Vec::new();
        for f in self.flows.values_mut() {
            while let Ok(m) = f.rx.try_recv() {
                match m {
                    Msg::Batch(b) => f.merge.handle_arrivals(now_ns, &b),
                    Msg::End { dropped } => {
                        self.counters.peer_dropped += dropped;
                        f.over_since.get_or_insert_with(Instant::now);
                    }
                    Msg::Failed(why) => {
                        failures.push(why);
                        f.over_since.get_or_insert_with(Instant::now);
                    }
                }
            }
            for s in f.merge.poll(now_ns) {
                self.wren.handle_segment(&s);
            }
        }
        for why in failures {
            self.fail(why);
        }
        // Flows whose capture is over are dropped after a pause (a new request follows if the
        // flow is still sending).
        let gone: Vec<_> = self
            .flows
            .iter()
            .filter(|(_, f)| f.over_since.is_some_and(|t| t.elapsed() >= RETRY))
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Some(f) = self.flows.remove(&k) {
                add(&mut self.merged_before, f.merge.counters());
            }
        }
        let _ = self.wren.take_trains();
        // The merged stream lags `now` by the merge's hold: windows close on its time.
        let hold = self
            .flows
            .values()
            .map(|f| f.merge.hold_ns)
            .max()
            .unwrap_or(1_000_000_000);
        let at = if now_ns == u64::MAX {
            u64::MAX
        } else {
            now_ns.saturating_sub(hold)
        };
        let mut out = self.wren.poll_estimates(at);
        for e in &mut out {
            e.quality.method = "wren2";
        }
        out
    }
}

fn add(m: &mut MergeCounters, c: MergeCounters) {
    m.sent += c.sent;
    m.arrivals += c.arrivals;
    m.matched += c.matched;
    m.unmatched += c.unmatched;
    m.sent_overflow += c.sent_overflow;
    m.arrival_overflow += c.arrival_overflow;
    m.offset_lowered += c.offset_lowered;
    m.first_arrival_ns = match (m.first_arrival_ns, c.first_arrival_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
}

/// One peer capture: connect, ask, and pass the records on until the end or `stop`.
#[allow(clippy::too_many_arguments)]
fn capture(
    peer: SocketAddr,
    key: &Key,
    pacer: Arc<Pacer>,
    sender: SocketAddr,
    receiver: SocketAddr,
    tx: &SyncSender<Msg>,
    stop: &AtomicBool,
    dropped: &std::sync::atomic::AtomicU64,
) -> Result<(), String> {
    let s =
        Session::connect(peer, key, pacer, Duration::from_secs(3)).map_err(|e| e.to_string())?;
    let mut cap = s
        .into_capture(
            sender,
            receiver,
            CAPTURE_FOR,
            mgrp_engine::proto::MAX_CAPTURE_RECORDS,
        )
        .map_err(|e| e.to_string())?;
    while !stop.load(Ordering::Relaxed) {
        match cap.recv(Instant::now() + Duration::from_millis(100)) {
            Ok(None) => {}
            Ok(Some(CaptureEvent::Batch(recs))) => {
                let batch = recs
                    .iter()
                    .map(|r| Arrival {
                        seq: r.seq,
                        len: r.len,
                        rx_ns: r.rx_ns,
                    })
                    .collect();
                if let Err(TrySendError::Full(_)) = tx.try_send(Msg::Batch(batch)) {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Some(CaptureEvent::End { dropped, .. })) => {
                let _ = tx.send(Msg::End { dropped });
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

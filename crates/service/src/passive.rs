//! Passive sources: Wren on the TCP traffic an interface carries, estimates into the store
//! like any other (source `passive`, method `wren`, zero probe bytes). One thread per source.

use crate::config::PassiveSource;
use crate::Hub;
use mgrp_capture::live::{interface_addrs, LiveCapture};
use mgrp_estimate::wren::{Wren, WrenParams};
use mgrp_store::Record;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mgrp_counters::counters! {
    /// A passive source's counters.
    pub struct PassiveCounters => PassiveSnapshot {
        /// TCP segments a passive source analysed
        segments,
        /// Estimates a passive source stored
        estimates,
        /// Packets the kernel dropped before the capture read them
        capture_dropped,
        /// Passive source errors (capture, store)
        errors,
        /// Two-sided (wren2) estimates stored
        wren2_estimates,
        /// Two-sided peer captures asked for
        wren2_requests,
        /// Two-sided peer captures refused or failed
        wren2_failures,
        /// Trains Wren judged (why there are or are not estimates: the next three)
        trains,
        /// Trains whose RTTs rose throughout: their rate was above A (an upper bound only)
        trains_rising,
        /// Trains that gave a lower bound on A (estimates come only from these)
        trains_lower_bound,
        /// Runs of segments too short or too uneven to be a train (e.g. bursty, app-limited traffic)
        short_runs,
    }
}

/// A running passive source as others see it.
#[derive(Default)]
pub struct PassiveState {
    pub counters: PassiveCounters,
    last_error: Mutex<Option<String>>,
    pub(crate) stop: AtomicBool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PassiveView {
    pub iface: String,
    pub flow: Option<String>,
    /// The counters, flat beside the source (as the API has always shown them).
    #[serde(flatten)]
    pub counters: PassiveSnapshot,
    pub last_error: Option<String>,
}

impl PassiveState {
    pub fn view(&self, src: &PassiveSource) -> PassiveView {
        PassiveView {
            iface: src.iface.clone(),
            flow: src.flow.clone(),
            counters: self.counters.snapshot(),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// Keep `why` as the last error without counting it (counted where it happened).
    fn note(&self, why: &str) {
        if let Ok(mut last) = self.last_error.lock() {
            if last.as_deref() != Some(why) {
                *last = Some(why.to_string());
            }
        }
    }

    fn fail(&self, src: &PassiveSource, why: &str) {
        self.counters.bump(&self.counters.errors, 1);
        if let Ok(mut last) = self.last_error.lock() {
            if last.as_deref() != Some(why) {
                eprintln!("mgrp agent: passive on {}: {why}", src.iface);
                *last = Some(why.to_string());
            }
        }
    }
}

/// Capture on the source's interface until told to stop; a capture that fails is opened again
/// after a pause (the interface may come back).
pub(crate) fn run(src: &PassiveSource, st: &PassiveState, hub: &Hub, peer: Option<PeerAccess>) {
    while !st.stop.load(Ordering::Relaxed) {
        if let Err(e) = capture(src, st, hub, peer.as_ref()) {
            st.fail(src, &e);
            let until = Instant::now() + Duration::from_secs(5);
            while !st.stop.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The counters that say what Wren made of the traffic: trains, rising, lower bounds, short runs.
fn train_counters(c: &PassiveCounters) -> [&AtomicU64; 4] {
    [
        &c.trains,
        &c.trains_rising,
        &c.trains_lower_bound,
        &c.short_runs,
    ]
}

/// What a source needs to ask its peer agent for arrivals (two-sided Wren).
#[derive(Clone)]
pub(crate) struct PeerAccess {
    pub key: mgrp_engine::auth::Key,
    pub pacer: std::sync::Arc<mgrp_engine::pacer::Pacer>,
}

fn capture(
    src: &PassiveSource,
    st: &PassiveState,
    hub: &Hub,
    access: Option<&PeerAccess>,
) -> Result<(), String> {
    let mut cap =
        LiveCapture::open(&src.iface, src.flow.as_deref(), None).map_err(|e| e.to_string())?;
    let local = interface_addrs(&src.iface).map_err(|e| e.to_string())?;
    if local.is_empty() {
        return Err(format!("{} has no IP address", src.iface));
    }
    let mut wren = Wren::new(WrenParams {
        window_ns: src.window.as_nanos() as u64,
        ..WrenParams::default()
    })
    .with_local(local.clone());
    let two = match (src.peer, access) {
        (Some(peer), Some(a)) => Some(crate::wren2::TwoSided::new(
            peer,
            a.key.clone(),
            a.pacer.clone(),
            local,
            src.window.as_nanos() as u64,
        )),
        _ => None,
    };
    // Both the per-segment hook and the poll use it, one at a time.
    let two_cell = std::cell::RefCell::new(two);
    let dropped0 = cap.stats().dropped;
    // Counted across captures: a reopened one adds to what the earlier ones fed.
    let segments0 = st.counters.segments.load(Ordering::Relaxed);
    let trains0 = train_counters(&st.counters).map(|a| a.load(Ordering::Relaxed));
    let stop = || st.stop.load(Ordering::Relaxed);
    let every = Duration::from_millis(100);
    let also = |s: &mgrp_estimate::wren::Segment| {
        if let Some(t) = two_cell.borrow_mut().as_mut() {
            t.handle_segment(s);
        }
    };
    mgrp_capture::feed::feed_wren_and(&mut cap, &mut wren, every, stop, also, |wren, cap, poll| {
        st.counters
            .segments
            .store(segments0 + poll.segments, Ordering::Relaxed);
        st.counters.capture_dropped.store(
            cap.stats().dropped.saturating_sub(dropped0),
            Ordering::Relaxed,
        );
        let w = wren.counters();
        let now = [
            w.trains,
            w.trains_increasing,
            w.trains_lower_bound,
            w.short_runs,
        ];
        for ((a, base), v) in train_counters(&st.counters)
            .into_iter()
            .zip(trains0)
            .zip(now)
        {
            a.store(base + v, Ordering::Relaxed);
        }
        let mut recs: Vec<Record> = wren
            .poll_estimates(poll.now_ns)
            .iter()
            .map(crate::record::from_passive)
            .collect();
        if let Some(t) = two_cell.borrow_mut().as_mut() {
            let two: Vec<Record> = t
                .poll(poll.now_ns)
                .iter()
                .map(crate::record::from_passive)
                .collect();
            st.counters
                .bump(&st.counters.wren2_estimates, two.len() as u64);
            let c = t.counters();
            st.counters
                .wren2_requests
                .store(c.requests, Ordering::Relaxed);
            st.counters
                .wren2_failures
                .store(c.failures, Ordering::Relaxed);
            if let Some(e) = c.last_error {
                st.note(&e);
            }
            recs.extend(two);
        }
        if !recs.is_empty() {
            hub.publish(&recs).map_err(|e| e.to_string())?;
            st.counters.bump(&st.counters.estimates, recs.len() as u64);
        }
        Ok::<(), String>(())
    })
    .map_err(|e| e.to_string())?;
    Ok(())
}

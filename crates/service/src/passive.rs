//! Passive sources: Wren on the TCP traffic an interface carries, estimates into the store
//! like any other (source `passive`, method `wren`, zero probe bytes). One thread per source.

use crate::config::PassiveSource;
use crate::Hub;
use mgrp_capture::live::{interface_addrs, LiveCapture};
use mgrp_estimate::wren::{PassiveEstimate, Wren, WrenParams};
use mgrp_store::Record;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A running passive source as others see it.
#[derive(Default)]
pub struct PassiveState {
    pub segments: AtomicU64,
    pub estimates: AtomicU64,
    pub capture_dropped: AtomicU64,
    pub errors: AtomicU64,
    last_error: Mutex<Option<String>>,
    pub(crate) stop: AtomicBool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PassiveView {
    pub iface: String,
    pub flow: Option<String>,
    pub segments: u64,
    pub estimates: u64,
    pub capture_dropped: u64,
    pub errors: u64,
    pub last_error: Option<String>,
}

impl PassiveState {
    pub fn view(&self, src: &PassiveSource) -> PassiveView {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PassiveView {
            iface: src.iface.clone(),
            flow: src.flow.clone(),
            segments: g(&self.segments),
            estimates: g(&self.estimates),
            capture_dropped: g(&self.capture_dropped),
            errors: g(&self.errors),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    fn fail(&self, src: &PassiveSource, why: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            if last.as_deref() != Some(why) {
                eprintln!("mgrp agent: passive on {}: {why}", src.iface);
                *last = Some(why.to_string());
            }
        }
    }
}

fn record(e: &PassiveEstimate) -> Record {
    Record {
        path: format!("{}->{}", e.src, e.dst),
        metric: "avail_bw".into(),
        t_ns: e.window_end_ns,
        value: e.value_bps,
        low: e.low_bps,
        // No train went above the estimate: nothing bounds A from above, and the range says
        // only what was seen.
        high: e.high_bps.unwrap_or(e.value_bps),
        method: e.quality.method.into(),
        source: "passive".into(),
        probe_bytes: 0,
        trains: e.quality.trains,
        confidence: e.quality.confidence,
        elapsed_s: e.quality.elapsed_s,
        final_: true,
    }
}

/// Capture on the source's interface until told to stop; a capture that fails is opened again
/// after a pause (the interface may come back).
pub(crate) fn run(src: &PassiveSource, st: &PassiveState, hub: &Hub) {
    while !st.stop.load(Ordering::Relaxed) {
        if let Err(e) = capture(src, st, hub) {
            st.fail(src, &e);
            let until = Instant::now() + Duration::from_secs(5);
            while !st.stop.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn capture(src: &PassiveSource, st: &PassiveState, hub: &Hub) -> Result<(), String> {
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
    .with_local(local);
    let dropped0 = cap.stats().dropped;
    // Counted across captures: a reopened one adds to what the earlier ones fed.
    let segments0 = st.segments.load(Ordering::Relaxed);
    let stop = || st.stop.load(Ordering::Relaxed);
    let every = Duration::from_millis(100);
    mgrp_capture::feed::feed_wren(&mut cap, &mut wren, every, stop, |wren, cap, poll| {
        st.segments
            .store(segments0 + poll.segments, Ordering::Relaxed);
        st.capture_dropped.store(
            cap.stats().dropped.saturating_sub(dropped0),
            Ordering::Relaxed,
        );
        let recs: Vec<Record> = wren
            .poll_estimates(poll.now_ns)
            .iter()
            .map(record)
            .collect();
        if !recs.is_empty() {
            hub.publish(&recs)?;
            st.estimates.fetch_add(recs.len() as u64, Ordering::Relaxed);
        }
        Ok::<(), String>(())
    })
    .map_err(|e| e.to_string())?;
    Ok(())
}

//! A record of the streams the tracker sent and how each read, for `mgrp bench tracking`
//! (issue 13: why elastic riders cost the tracker its accuracy). Off unless a bench turns it
//! on; bounded; the tracker's decisions never read it.

use serde::Serialize;
use std::sync::Mutex;

/// One check, narrow re-search or reading stream (or the acquisition's end: "acquired").
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamRecord {
    /// The tracker's clock when the stream came back.
    pub t_ns: u64,
    /// "above", "below" (hold checks; "+wide" at the full margin), "narrow", "reading",
    /// "acquired".
    pub kind: String,
    pub rate_bps: f64,
    /// Probes planned, sent (an elastic train may end early) and received.
    pub planned: usize,
    pub sent: usize,
    pub received: usize,
    /// The trend test's verdict: "rising", "flat", "unknown"; for "acquired", the method.
    pub verdict: &'static str,
    /// The held value when the stream was judged.
    pub held_bps: Option<f64>,
    /// Rider bytes carried and competing bytes (the host's traffic the train displaced).
    pub rider_bytes: u64,
    pub competing_bytes: u64,
    /// What the host handed over while the train was out, its rate over the 200 ms before the
    /// train ended (every train since round 16; elastic ones only before), and the span of the
    /// probes that left.
    pub arrived_bytes: u64,
    pub beside_bytes: u64,
    pub host_bytes_per_s: u64,
    pub span_ns: u64,
    /// The trend test's group medians of the one-way delay (µs above the first group's).
    pub groups_us: Vec<f64>,
}

const MAX_RECORDS: usize = 200_000;

static TRACE: Mutex<Option<Vec<StreamRecord>>> = Mutex::new(None);

/// Start (or stop and drop) recording every tracker's streams in this process.
pub fn record_streams(on: bool) {
    if let Ok(mut t) = TRACE.lock() {
        *t = on.then(Vec::new);
    }
}

/// The streams recorded since the last call (recording stays on).
pub fn take_streams() -> Vec<StreamRecord> {
    TRACE
        .lock()
        .ok()
        .and_then(|mut t| t.as_mut().map(std::mem::take))
        .unwrap_or_default()
}

pub(crate) fn enabled() -> bool {
    TRACE.lock().is_ok_and(|t| t.is_some())
}

pub(crate) fn push(r: StreamRecord) {
    if let Ok(mut t) = TRACE.lock() {
        if let Some(v) = t.as_mut() {
            if v.len() < MAX_RECORDS {
                v.push(r);
            }
        }
    }
}

/// The acquiring search's conclusion: its method in `verdict` ("auto:slops", "auto:timeavg")
/// and its value in `held_bps`, so a run's record says how it started.
pub(crate) fn push_acquired(t_ns: u64, method: &'static str, value_bps: f64) {
    push(StreamRecord {
        t_ns,
        kind: "acquired".into(),
        verdict: method,
        held_bps: Some(value_bps),
        ..StreamRecord::default()
    });
}

//! A live capture feeding Wren: the loop `mgrp passive`, the passive bench and the service's
//! passive sources share. Segments go to Wren as they come; every `every` the caller gets Wren
//! and the capture back to take estimates, trains and counters.

use crate::live::LiveCapture;
use crate::Error;
use mgrp_estimate::wren::Wren;
use std::time::{Duration, Instant};

/// Where the loop is at a poll.
#[derive(Debug, Clone, Copy)]
pub struct Poll {
    /// Wall-clock now, ns: capture timestamps are wall-clock time, so Wren's windows close on it.
    pub now_ns: u64,
    /// Segments fed to Wren so far.
    pub segments: u64,
}

/// Why the loop ended early: the capture failed, or the caller's poll did.
#[derive(Debug, thiserror::Error)]
pub enum FeedError<E> {
    #[error(transparent)]
    Capture(#[from] Error),
    #[error("{0}")]
    Poll(E),
}

/// Feed `cap`'s segments to `wren` until `stop()`, calling `on_poll` every `every` (and not
/// after the loop: what to do at the end — flush, a last poll at `u64::MAX` — is the caller's).
/// Returns the number of segments fed. A capture error or an error of `on_poll` ends it.
pub fn feed_wren<E>(
    cap: &mut LiveCapture,
    wren: &mut Wren,
    every: Duration,
    stop: impl FnMut() -> bool,
    on_poll: impl FnMut(&mut Wren, &mut LiveCapture, Poll) -> Result<(), E>,
) -> Result<u64, FeedError<E>> {
    feed_wren_and(cap, wren, every, stop, |_| {}, on_poll)
}

/// [`feed_wren`], also handing every segment to `also` (a second analysis of the same capture,
/// e.g. two-sided Wren).
pub fn feed_wren_and<E>(
    cap: &mut LiveCapture,
    wren: &mut Wren,
    every: Duration,
    mut stop: impl FnMut() -> bool,
    mut also: impl FnMut(&mgrp_estimate::wren::Segment),
    mut on_poll: impl FnMut(&mut Wren, &mut LiveCapture, Poll) -> Result<(), E>,
) -> Result<u64, FeedError<E>> {
    let mut segments = 0u64;
    let mut last = Instant::now();
    while !stop() {
        if let Some(s) = cap.next_segment()? {
            segments += 1;
            wren.handle_segment(&s);
            also(&s);
        }
        if last.elapsed() >= every {
            last = Instant::now();
            let now_ns = mgrp_clock::realtime_ns();
            on_poll(wren, cap, Poll { now_ns, segments }).map_err(FeedError::Poll)?;
        }
    }
    Ok(segments)
}

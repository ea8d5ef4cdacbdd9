//! The local scheduler of one stream, sans-IO (the seed's LS): makes the stream's frames at
//! their times for the level it is told, queues them for its TCP connection, drops the least
//! important queued frames first when it falls behind, and reports what it sustained.
//!
//! - **Behind** means more unsent bytes queued than the connection carries in `backlog`: the
//!   level's rate, or the rate of the last report's window if that one failed (the kernel's
//!   own buffer is kept small by the I/O side, `TCP_NOTSENT_LOWAT`, so a slow path shows here).
//!   Then queued frames not yet begun are dropped: the newest B first, then the newest P (it
//!   breaks the fewest dependants), then the oldest I. A frame that can no longer arrive by its
//!   deadline is dropped too. A frame partly written is always finished.
//! - **Reports** every `report_every`: the rate written into the connection (a lower bound on
//!   what the path gives: it carried that), and whether frames were dropped (the stream tried
//!   and failed: the rate is then also an upper bound).

use crate::workload::{kind_of, Kind, Level, SLOT_NS};
use serde::Serialize;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Unsent bytes allowed in the queue, as time at the level's rate.
    pub backlog_ns: u64,
    /// A frame generated longer ago than this will not be shown (the receiver's playout delay).
    pub deadline_ns: u64,
    pub report_every_ns: u64,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            backlog_ns: 500_000_000,
            deadline_ns: 1_000_000_000,
            report_every_ns: 1_000_000_000,
        }
    }
}

/// A frame in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub index: u64,
    pub kind: Kind,
    pub gen_ns: u64,
    /// Bytes already written.
    pub written: usize,
}

impl Frame {
    pub fn size(&self) -> usize {
        self.kind.size()
    }
}

/// What a stream tells the global scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Report {
    pub stream: usize,
    pub at_ns: u64,
    pub level: Level,
    /// Bit/s written into the connection over the report's window.
    pub sent_bps: f64,
    /// Frames dropped in the window (behind, or past their deadline).
    pub dropped: u64,
}

impl Report {
    /// The stream could not keep up: its rate is an upper bound as well.
    pub fn failed(&self) -> bool {
        self.dropped > 0
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LocalCounts {
    /// Frames the level called for.
    pub intended: u64,
    pub intended_bytes: u64,
    /// Frames written whole.
    pub sent: u64,
    pub dropped_behind: u64,
    pub dropped_late: u64,
    pub level_changes: u64,
}

pub struct Local {
    cfg: LocalConfig,
    stream: usize,
    start_ns: u64,
    level: Level,
    next_index: u64,
    queue: VecDeque<Frame>,
    window_start: u64,
    window_bytes: u64,
    window_dropped: u64,
    /// The rate of the last report's window.
    last_rate_bps: Option<f64>,
    counts: LocalCounts,
}

impl Local {
    /// A stream whose frame slot 0 is at `start_ns`.
    pub fn new(cfg: LocalConfig, stream: usize, level: Level, start_ns: u64) -> Local {
        Local {
            cfg,
            stream,
            start_ns,
            level,
            next_index: 0,
            queue: VecDeque::new(),
            window_start: start_ns,
            window_bytes: 0,
            window_dropped: 0,
            last_rate_bps: None,
            counts: LocalCounts::default(),
        }
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn set_level(&mut self, level: Level) {
        if level != self.level {
            self.level = level;
            self.counts.level_changes += 1;
        }
    }

    pub fn counts(&self) -> &LocalCounts {
        &self.counts
    }

    pub fn queued_bytes(&self) -> usize {
        self.queue.iter().map(|f| f.size() - f.written).sum()
    }

    /// Make the frames due by `now`, then drop what the stream cannot send in time.
    pub fn handle_tick(&mut self, now: u64) {
        while self.start_ns + self.next_index * SLOT_NS <= now {
            let index = self.next_index;
            self.next_index += 1;
            let kind = kind_of(index);
            if self.level.carries(kind) {
                self.counts.intended += 1;
                self.counts.intended_bytes += kind.size() as u64;
                self.queue.push_back(Frame {
                    index,
                    kind,
                    gen_ns: self.start_ns + index * SLOT_NS,
                    written: 0,
                });
            }
        }
        // Past its deadline (and not begun): it would arrive too late to be shown.
        let deadline = self.cfg.deadline_ns;
        let before = self.queue.len();
        self.queue
            .retain(|f| f.written > 0 || f.gen_ns + deadline > now);
        let late = (before - self.queue.len()) as u64;
        self.counts.dropped_late += late;
        self.window_dropped += late;
        // Behind: drop the least important queued frames until the backlog fits.
        // At the rate the connection last carried (the level's before any report): the queue
        // then drains in `backlog`, well inside the deadline. At least one I frame.
        let rate = self
            .last_rate_bps
            .unwrap_or(self.level.rate_bps())
            .min(self.level.rate_bps());
        let allowed =
            ((rate / 8.0 * self.cfg.backlog_ns as f64 / 1e9) as usize).max(Kind::I.size());
        while self.queued_bytes() > allowed {
            let Some(i) = self.victim() else { break };
            self.queue.remove(i);
            self.counts.dropped_behind += 1;
            self.window_dropped += 1;
        }
    }

    /// The queued frame to drop first: the newest B, else the newest P, else the oldest I;
    /// never one partly written.
    fn victim(&self) -> Option<usize> {
        let untouched = |i: &usize| self.queue[*i].written == 0;
        for kind in [Kind::B, Kind::P] {
            if let Some(i) = (0..self.queue.len())
                .rev()
                .filter(untouched)
                .find(|&i| self.queue[i].kind == kind)
            {
                return Some(i);
            }
        }
        (0..self.queue.len()).find(|i| untouched(i))
    }

    /// The frame to write next and how much of it is written.
    pub fn head(&self) -> Option<&Frame> {
        self.queue.front()
    }

    /// `n` more bytes of the head frame went into the connection.
    pub fn handle_written(&mut self, n: usize) {
        self.window_bytes += n as u64;
        if let Some(f) = self.queue.front_mut() {
            f.written = (f.written + n).min(f.size());
            if f.written == f.size() {
                self.queue.pop_front();
                self.counts.sent += 1;
            }
        }
    }

    /// A report when its window is over.
    pub fn poll_report(&mut self, now: u64) -> Option<Report> {
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed < self.cfg.report_every_ns {
            return None;
        }
        let r = Report {
            stream: self.stream,
            at_ns: now,
            level: self.level,
            sent_bps: self.window_bytes as f64 * 8.0 / (elapsed as f64 / 1e9),
            dropped: self.window_dropped,
        };
        self.last_rate_bps = r.failed().then_some(r.sent_bps);
        self.window_start = now;
        self.window_bytes = 0;
        self.window_dropped = 0;
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Write up to `bytes` from the queue.
    fn drain(l: &mut Local, mut bytes: usize) {
        while let Some(f) = l.head().copied() {
            let n = (f.size() - f.written).min(bytes);
            if n == 0 {
                break;
            }
            l.handle_written(n);
            bytes -= n;
        }
    }

    #[test]
    fn a_stream_that_keeps_up_sends_every_frame_and_reports_its_rate_without_failure() {
        let mut l = Local::new(LocalConfig::default(), 0, Level::High, 0);
        for ms in (0..=1000).step_by(10) {
            l.handle_tick(ms * 1_000_000);
            drain(&mut l, usize::MAX);
        }
        let r = l.poll_report(S + 1).unwrap();
        assert!(!r.failed());
        // Slots 0..=30 are due by 1 s: a second and one I frame.
        assert!(
            (r.sent_bps - (1_160_000.0 + 13_500.0 * 8.0)).abs() < 1_000.0,
            "{r:?}"
        );
        assert_eq!(l.counts().intended, 31);
        assert_eq!(l.counts().sent, 31);
    }

    #[test]
    fn behind_it_drops_b_frames_first_then_p_and_reports_failure() {
        let mut l = Local::new(LocalConfig::default(), 0, Level::High, 0);
        // The path takes 500 kbit/s: 62,500 B/s, 625 B per 10 ms.
        let mut kinds_sent = [0u64; 3];
        let mut failed = false;
        for ms in (0..4000).step_by(10) {
            l.handle_tick(ms * 1_000_000);
            if ms == 2000 {
                kinds_sent = [0; 3];
            }
            let before = l.counts().sent;
            let head = l.head().map(|f| f.kind);
            drain(&mut l, 625);
            if l.counts().sent > before {
                kinds_sent[head.unwrap().code() as usize] += 1;
            }
            if let Some(r) = l.poll_report(ms * 1_000_000) {
                // 101 ticks of 625 B fall in a 1 s window: at most 505 kbit/s.
                assert!(r.sent_bps <= 505_000.0 + 1.0, "{r:?}");
                failed |= r.failed();
            }
        }
        assert!(failed);
        // Over the last 2 s, once the rate is learnt: every I frame (4) went, and P frames
        // before B frames (I+P alone need 704 kbit/s: some P are given up too).
        assert!(kinds_sent[0] >= 4, "{kinds_sent:?}");
        assert!(kinds_sent[1] > kinds_sent[2], "{kinds_sent:?}");
        assert!(l.counts().dropped_behind > 0);
    }

    #[test]
    fn a_partly_written_frame_is_never_dropped_and_the_level_decides_what_is_made() {
        let mut l = Local::new(LocalConfig::default(), 0, Level::Low, 0);
        l.handle_tick(0);
        l.handle_written(100);
        // A long stall: everything else is past its deadline.
        l.handle_tick(5 * S);
        assert_eq!(l.head().map(|f| (f.index, f.written)), Some((0, 100)));
        let c = l.counts();
        // Low: only the I frames of 5 s (slots 0, 15, ..., 150).
        assert_eq!(c.intended, 11);
    }
}

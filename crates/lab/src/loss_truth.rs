//! Ground truth for loss episodes, from a drop log: when the path's drop counters (the
//! bottleneck qdisc's drops plus the loss line's losses) went up.
//!
//! The log holds one entry per counter read that saw new drops: the read before and this one
//! bracket them. A **truth episode** is a maximal stretch of such brackets with less than one
//! slot between consecutive ones (drops closer than a slot are one episode: no slot-based prober
//! could tell them apart), from the first bracket's start to the last one's end. Its **frequency**
//! is the share of the window the episodes cover and its **mean duration** their mean length,
//! the continuous-time quantities badabing estimates. The reads are ~1 ms apart, so an episode
//! reads up to one read interval long.
//!
//! The slot variant (slots of the window with ≥ 1 drop, episodes as maximal runs of them) is
//! reported beside it: it counts every slot an episode touches, so on average one slot per
//! episode more than the time the episode lasted.

use serde::Serialize;

/// New drops seen between two counter reads (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DropEntry {
    pub from_ns: u64,
    pub to_ns: u64,
    pub drops: u64,
    /// Of them, lost by the loss line (the rest: the bottleneck queue's).
    pub line: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TruthEpisodes {
    pub window_s: f64,
    pub drops: u64,
    pub line_drops: u64,
    pub episodes: u64,
    /// Share of the window in episodes, and their mean length (s; `None` without episodes).
    pub frequency: f64,
    pub mean_duration_s: Option<f64>,
    /// The slot variant: share of slots with a drop, mean run of such slots (s).
    pub slot_frequency: f64,
    pub slot_mean_duration_s: Option<f64>,
}

/// The truth of `[from_ns, to_ns)` from `log` (oldest first) with slots of `slot_ns`.
pub fn episodes(log: &[DropEntry], from_ns: u64, to_ns: u64, slot_ns: u64) -> TruthEpisodes {
    let span = to_ns.saturating_sub(from_ns).max(1);
    let inside: Vec<&DropEntry> = log
        .iter()
        .filter(|e| e.drops > 0 && e.to_ns > from_ns && e.from_ns < to_ns)
        .collect();
    // Episodes: brackets clipped to the window, merged across gaps shorter than a slot.
    let mut eps: Vec<(u64, u64)> = Vec::new();
    for e in &inside {
        let (a, b) = (e.from_ns.max(from_ns), e.to_ns.min(to_ns));
        match eps.last_mut() {
            Some(last) if a < last.1 + slot_ns => last.1 = last.1.max(b),
            _ => eps.push((a, b)),
        }
    }
    let covered: u64 = eps.iter().map(|(a, b)| b - a).sum();
    // Slots: a bracket's drops count in the slot its end falls in.
    let slots = span.div_ceil(slot_ns);
    let mut hit = vec![false; slots as usize];
    for e in &inside {
        let t = e.to_ns.clamp(from_ns, to_ns - 1);
        hit[((t - from_ns) / slot_ns) as usize] = true;
    }
    let congested = hit.iter().filter(|h| **h).count() as u64;
    let runs = hit
        .iter()
        .enumerate()
        .filter(|(i, h)| **h && (*i == 0 || !hit[i - 1]))
        .count() as u64;
    let slot_s = slot_ns as f64 / 1e9;
    TruthEpisodes {
        window_s: span as f64 / 1e9,
        drops: inside.iter().map(|e| e.drops).sum(),
        line_drops: inside.iter().map(|e| e.line).sum(),
        episodes: eps.len() as u64,
        frequency: covered as f64 / span as f64,
        mean_duration_s: (!eps.is_empty()).then(|| covered as f64 / eps.len() as f64 / 1e9),
        slot_frequency: congested as f64 / slots as f64,
        slot_mean_duration_s: (runs > 0).then(|| congested as f64 / runs as f64 * slot_s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Reads every 1 ms from `t0`; drops in the reads that end in `[a, b)` of each episode.
    fn log(t0: u64, n: u64, episodes: &[(u64, u64)]) -> Vec<DropEntry> {
        (1..=n)
            .map(|i| t0 + i * MS)
            .filter(|t| episodes.iter().any(|(a, b)| (a..b).contains(&t)))
            .map(|t| DropEntry {
                from_ns: t - MS,
                to_ns: t,
                drops: 2,
                line: 1,
            })
            .collect()
    }

    #[test]
    fn episodes_cover_their_drops_and_merge_within_a_slot() {
        // Drops over 21..61 ms and 101..121 ms of a 200 ms window; a gap of 4 ms inside the
        // second (under a 10 ms slot) does not split it.
        let mut l = log(0, 200, &[(21 * MS, 61 * MS), (101 * MS, 111 * MS)]);
        l.extend(log(0, 200, &[(115 * MS, 121 * MS)]));
        l.sort_by_key(|e| e.to_ns);
        let t = episodes(&l, 0, 200 * MS, 10 * MS);
        assert_eq!(t.episodes, 2);
        // [20, 60] and [100, 120]: 40 + 20 ms of 200.
        assert!((t.frequency - 0.3).abs() < 1e-9, "{t:?}");
        assert!((t.mean_duration_s.unwrap() - 0.030).abs() < 1e-9);
        assert_eq!((t.drops, t.line_drops), (2 * (40 + 10 + 6), 40 + 10 + 6));
        // Slots 2..=6 (drop reads end at 21..=60 ms) and 10..=12: 8 of 20, runs of 5 and 3.
        assert!((t.slot_frequency - 0.4).abs() < 1e-9, "{t:?}");
        assert!((t.slot_mean_duration_s.unwrap() - 0.040).abs() < 1e-9);
    }

    #[test]
    fn the_window_clips_episodes_and_no_drops_is_no_episode() {
        let l = log(0, 100, &[(1, 100 * MS + 1)]);
        let t = episodes(&l, 50 * MS, 70 * MS, 10 * MS);
        assert_eq!((t.episodes, t.frequency), (1, 1.0));
        let t = episodes(&l, 200 * MS, 300 * MS, 10 * MS);
        assert_eq!((t.episodes, t.frequency, t.mean_duration_s), (0, 0.0, None));
        assert_eq!((t.slot_frequency, t.slot_mean_duration_s), (0.0, None));
    }
}

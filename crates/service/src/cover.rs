//! Whether other evidence already covers a tracked path, so its active rounds can back off
//! (issue 13 item 2): a sans-IO state machine (explicit `now_ns`, Unix time as the records
//! carry it; no clock, no sockets).
//!
//! Passive (Wren) and inline (ImTCP) estimates of the same path cost no probe bytes. While the
//! latest of either is fresh (at most `fresh_ns` old) and agrees with the value the tracker
//! holds (within `agree_share` of C, the tracker's margin: the resolution its own checks
//! have), a due round is not run: the path is "covered by" that source. Rounds resume as soon
//! as the evidence goes stale or disagrees — a disagreement is exactly what the tracker's
//! checks and searches are for — and at least one round runs every `recheck_ns`, so the
//! agreement is itself re-tested against the active measurement now and then.

use serde::Serialize;

/// Sources whose estimates can cover a path, in the order they are preferred.
pub const SOURCES: [&str; 2] = ["inline", "passive"];

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CoverParams {
    /// Evidence older than this (ns) covers nothing.
    pub fresh_ns: u64,
    /// Evidence within this share of C of the held value agrees with it.
    pub agree_share: f64,
    /// An active round runs at least this often (ns), covered or not.
    pub recheck_ns: u64,
}

impl Default for CoverParams {
    fn default() -> Self {
        CoverParams {
            fresh_ns: 10_000_000_000,
            agree_share: 0.05,
            recheck_ns: 60_000_000_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    t_ns: u64,
    value_bps: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Cover {
    p: CoverParams,
    /// The latest estimate of each source in [`SOURCES`].
    latest: [Option<Seen>; 2],
    /// When the last active round ran.
    last_active_ns: Option<u64>,
    covered_by: Option<&'static str>,
}

impl Cover {
    pub fn new(p: CoverParams) -> Cover {
        Cover {
            p,
            ..Cover::default()
        }
    }

    /// An estimate of this path from `source` (others are ignored), made at `t_ns`.
    pub fn handle_evidence(&mut self, source: &str, t_ns: u64, value_bps: f64) {
        let Some(i) = SOURCES.iter().position(|s| *s == source) else {
            return;
        };
        if !(value_bps.is_finite() && value_bps >= 0.0) {
            return;
        }
        if self.latest[i].is_some_and(|s| s.t_ns > t_ns) {
            return;
        }
        self.latest[i] = Some(Seen { t_ns, value_bps });
    }

    /// An active round ran at `now_ns`.
    pub fn handle_active(&mut self, now_ns: u64) {
        self.last_active_ns = Some(now_ns);
        self.covered_by = None;
    }

    /// A round is due at `now_ns`, the tracker holding `held_bps` on a path of `capacity_bps`:
    /// the source that covers the path (skip the round), or `None` (run it).
    pub fn poll(
        &mut self,
        now_ns: u64,
        held_bps: Option<f64>,
        capacity_bps: Option<f64>,
    ) -> Option<&'static str> {
        self.covered_by = self.judge(now_ns, held_bps, capacity_bps);
        self.covered_by
    }

    fn judge(
        &self,
        now_ns: u64,
        held_bps: Option<f64>,
        capacity_bps: Option<f64>,
    ) -> Option<&'static str> {
        let (held, c) = (held_bps?, capacity_bps?);
        // Nothing active to agree with yet, or the agreement is due a re-test.
        let last = self.last_active_ns?;
        if now_ns.saturating_sub(last) >= self.p.recheck_ns {
            return None;
        }
        SOURCES.iter().zip(&self.latest).find_map(|(src, seen)| {
            let s = (*seen)?;
            let fresh = now_ns.saturating_sub(s.t_ns) <= self.p.fresh_ns;
            let agrees = (s.value_bps - held).abs() <= self.p.agree_share * c;
            (fresh && agrees).then_some(*src)
        })
    }

    /// What covered the path at the last poll (`None`: the round ran or was due to).
    pub fn covered_by(&self) -> Option<&'static str> {
        self.covered_by
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const C: f64 = 20e6;

    fn cover() -> Cover {
        let mut c = Cover::new(CoverParams::default());
        c.handle_active(100 * S);
        c
    }

    #[test]
    fn fresh_agreeing_evidence_covers() {
        let mut c = cover();
        c.handle_evidence("passive", 101 * S, 10.5e6);
        assert_eq!(c.poll(102 * S, Some(10e6), Some(C)), Some("passive"));
        assert_eq!(c.covered_by(), Some("passive"));
        // Inline is preferred when both cover.
        c.handle_evidence("inline", 101 * S, 9.2e6);
        assert_eq!(c.poll(102 * S, Some(10e6), Some(C)), Some("inline"));
    }

    #[test]
    fn stale_or_disagreeing_evidence_does_not() {
        let mut c = cover();
        c.handle_evidence("passive", 101 * S, 10.5e6);
        // 10 s later it is stale.
        assert_eq!(c.poll(111 * S + 1, Some(10e6), Some(C)), None);
        // Fresh but 1.5 Mbit/s off on a 20 Mbit/s path (margin 1 Mbit/s): disagrees.
        c.handle_evidence("passive", 112 * S, 11.5e6);
        assert_eq!(c.poll(113 * S, Some(10e6), Some(C)), None);
        assert_eq!(c.covered_by(), None);
        // Active sources and other metrics' sources never cover.
        c.handle_evidence("active", 112 * S, 10e6);
        c.handle_evidence("rider", 112 * S, 10e6);
        assert_eq!(c.poll(113 * S, Some(10e6), Some(C)), None);
    }

    #[test]
    fn an_active_round_runs_at_least_every_recheck() {
        let mut c = cover();
        let mut active = 0;
        let mut t = 100 * S;
        // Evidence every second, always agreeing; a round due every 250 ms for 5 minutes.
        while t < 400 * S {
            if t % S == 0 {
                c.handle_evidence("inline", t, 10.2e6);
            }
            if c.poll(t, Some(10e6), Some(C)).is_none() {
                active += 1;
                c.handle_active(t);
            }
            t += S / 4;
        }
        // One a minute after the first: at 160, 220, 280 and 340 s.
        assert_eq!(active, 4);
    }

    #[test]
    fn nothing_covers_before_a_value_capacity_and_round() {
        let mut c = Cover::new(CoverParams::default());
        c.handle_evidence("passive", S, 10e6);
        assert_eq!(
            c.poll(2 * S, Some(10e6), Some(C)),
            None,
            "no active round yet"
        );
        c.handle_active(2 * S);
        assert_eq!(c.poll(3 * S, None, Some(C)), None);
        assert_eq!(c.poll(3 * S, Some(10e6), None), None);
        assert_eq!(c.poll(3 * S, Some(10e6), Some(C)), Some("passive"));
        // Older evidence does not replace newer; bad values are ignored.
        c.handle_evidence("passive", S / 2, 1e6);
        c.handle_evidence("passive", 3 * S, f64::NAN);
        assert_eq!(c.poll(3 * S, Some(10e6), Some(C)), Some("passive"));
    }
}

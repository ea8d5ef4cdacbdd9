//! Tneck (seed 003 §4.1), sans-IO: which link of a path is the bottleneck a TCP flow faces.
//!
//! A few parallel traceroutes with the path idle give each hop's **base** delay (the minimum).
//! Then a TCP flow runs to the peer and one parallel traceroute goes out every RTT; in each such
//! **sample** a hop's delay minus its base is the queueing added up to that hop, and a link's
//! **rise** is that increase at its far end minus the increase at its near end (the thesis
//! says "the link with the maximum increase in delay" without saying per link; cumulative
//! increases only grow toward the destination, so the per-link difference is what it must mean).
//! A sample **points at** the link with the largest rise when that rise is at least
//! [`TneckConfig::min_rise_ns`]. The link pointed at in [`TneckConfig::confirm`] consecutive
//! pointing samples is the bottleneck. Choices the seed leaves open, and why:
//! - a sample where no link rose by the threshold (the flow's window just halved, the queue
//!   drained) neither counts nor breaks the streak: TCP's sawtooth empties the queue every
//!   few RTTs, and "four consecutive samples during which we see the increased delay" reads as
//!   consecutive among those that see it;
//! - a sample that points at another link breaks the streak;
//! - a link whose near or far hop did not answer in a sample has no rise in it (a silent router
//!   merges nothing into its neighbours: a guess would blame the wrong link);
//! - confidence = the share of pointing samples so far that pointed at the verdict's link.
//!
//! The hop delays are what [`Round::delays`] gives: an RTT for a router, a one-way delay for
//! the agent at the end. Queueing on the forward path adds the same to both, so increases over
//! base compare across the two kinds.

use crate::trace::Round;
use serde::{Deserialize, Serialize};

/// Most hops a path may have here (the trace's TTL bound).
const MAX_LINKS: usize = crate::trace::MAX_TTL as usize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TneckConfig {
    /// Idle rounds whose per-hop minimum is the base (the thesis: "typically five").
    pub base_rounds: u32,
    /// Consecutive pointing samples that confirm a link (the thesis: four).
    pub confirm: u32,
    /// Smallest rise that counts as increased delay. 1 ms default: a router's ICMP answer on
    /// this testbed varies by tens of µs, and one 1500-byte packet queued at 12 Mbit/s is 1 ms.
    pub min_rise_ns: u64,
}

impl Default for TneckConfig {
    fn default() -> Self {
        TneckConfig {
            base_rounds: 5,
            confirm: 4,
            min_rise_ns: 1_000_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TneckError {
    #[error("base rounds must be 1..=100, not {0}")]
    BaseRounds(u32),
    #[error("confirmation needs 1..=100 samples, not {0}")]
    Confirm(u32),
    #[error("no base yet: the idle traceroutes found no hop that answered")]
    NoBase,
}

impl TneckConfig {
    pub fn validate(&self) -> Result<(), TneckError> {
        if !(1..=100).contains(&self.base_rounds) {
            return Err(TneckError::BaseRounds(self.base_rounds));
        }
        if !(1..=100).contains(&self.confirm) {
            return Err(TneckError::Confirm(self.confirm));
        }
        Ok(())
    }
}

/// What one loaded sample said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Per link (index 0 = sender to hop 1), the rise over base, ns; `None` where a hop of the
    /// link did not answer.
    pub rises_ns: Vec<Option<i64>>,
    /// The link this sample points at (1-based: link k ends at hop k), if any rose enough.
    pub points_at: Option<u8>,
}

/// The bottleneck link, once confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Link k runs from hop k−1 (the sender for k = 1) to hop k.
    pub link: u8,
    /// Loaded samples taken until the verdict.
    pub samples: u32,
    /// Share of pointing samples that pointed at this link.
    pub confidence: f64,
    /// Its median rise over the confirming samples, ns.
    pub rise_ns: i64,
}

/// Tneck's state: base, then samples until a link is confirmed.
#[derive(Debug, Clone)]
pub struct Tneck {
    cfg: TneckConfig,
    base: Vec<Option<i64>>,
    base_rounds: u32,
    samples: Vec<Sample>,
    votes: Vec<u32>,
    pointing: u32,
    streak: Option<(u8, Vec<i64>)>,
    verdict: Option<Verdict>,
    /// Samples taken before the last [`Tneck::rearm`].
    epoch_start: usize,
}

impl Tneck {
    pub fn new(cfg: TneckConfig) -> Result<Tneck, TneckError> {
        cfg.validate()?;
        Ok(Tneck {
            cfg,
            base: Vec::new(),
            base_rounds: 0,
            samples: Vec::new(),
            votes: Vec::new(),
            pointing: 0,
            streak: None,
            verdict: None,
            epoch_start: 0,
        })
    }

    pub fn config(&self) -> &TneckConfig {
        &self.cfg
    }

    /// One idle round: each hop's base is its minimum delay so far.
    pub fn handle_base(&mut self, round: &Round) {
        let d = round.delays();
        let n = d.len().min(MAX_LINKS);
        if self.base.len() < n {
            self.base.resize(n, None);
        }
        for (b, x) in self.base.iter_mut().zip(d.iter().take(n)) {
            if let Some(x) = *x {
                *b = Some(b.map_or(x, |b: i64| b.min(x)));
            }
        }
        self.base_rounds += 1;
    }

    /// Enough idle rounds for a base (and some hop answered in them).
    pub fn base_ready(&self) -> bool {
        self.base_rounds >= self.cfg.base_rounds && self.base.iter().any(Option::is_some)
    }

    pub fn base(&self) -> &[Option<i64>] {
        &self.base
    }

    /// One loaded round. Returns the verdict when this sample confirms a link (and keeps
    /// returning it afterwards).
    pub fn handle_sample(&mut self, round: &Round) -> Result<Option<Verdict>, TneckError> {
        if !self.base.iter().any(Option::is_some) {
            return Err(TneckError::NoBase);
        }
        if self.verdict.is_some() {
            return Ok(self.verdict);
        }
        let rises = self.rises(&round.delays());
        let points_at = rises
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.map(|r| (i, r)))
            .filter(|&(_, r)| r >= self.cfg.min_rise_ns as i64)
            .max_by_key(|&(_, r)| r)
            .map(|(i, _)| i as u8 + 1);
        if let Some(link) = points_at {
            let rise = rises[link as usize - 1].unwrap_or(0);
            self.pointing += 1;
            if self.votes.len() < link as usize {
                self.votes.resize(link as usize, 0);
            }
            self.votes[link as usize - 1] += 1;
            match &mut self.streak {
                Some((l, rs)) if *l == link => rs.push(rise),
                s => *s = Some((link, vec![rise])),
            }
        }
        self.samples.push(Sample {
            rises_ns: rises,
            points_at,
        });
        if let Some((link, rs)) = &self.streak {
            if rs.len() >= self.cfg.confirm as usize {
                let mut sorted = rs.clone();
                sorted.sort_unstable();
                self.verdict = Some(Verdict {
                    link: *link,
                    samples: (self.samples.len() - self.epoch_start) as u32,
                    confidence: self.votes[*link as usize - 1] as f64 / self.pointing as f64,
                    rise_ns: sorted[sorted.len() / 2],
                });
            }
        }
        Ok(self.verdict)
    }

    /// Per link of `round`, the rise over base of its far hop minus that of its near hop.
    pub fn rises_of(&self, round: &Round) -> Vec<Option<i64>> {
        self.rises(&round.delays())
    }

    /// Per link, the rise over base of its far hop minus that of its near hop.
    fn rises(&self, delays: &[Option<i64>]) -> Vec<Option<i64>> {
        let n = delays.len().min(self.base.len());
        let inc: Vec<Option<i64>> = (0..n).map(|h| Some(delays[h]? - self.base[h]?)).collect();
        (0..n)
            .map(|k| {
                let near = if k == 0 { Some(0) } else { inc[k - 1] };
                Some(inc[k]? - near?)
            })
            .collect()
    }

    /// Forget the verdict, the streak and the votes (the base stays) so that later samples
    /// confirm a link afresh: how a long-running flow follows a bottleneck that moves. The
    /// next verdict's `samples` and `confidence` count from here.
    pub fn rearm(&mut self) {
        self.verdict = None;
        self.streak = None;
        self.votes.clear();
        self.pointing = 0;
        self.epoch_start = self.samples.len();
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub fn verdict(&self) -> Option<Verdict> {
        self.verdict
    }

    /// How often each link was pointed at (index 0 = link 1).
    pub fn votes(&self) -> &[u32] {
        &self.votes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Answer;
    use mgrp_train::HopClock;
    use std::net::{IpAddr, Ipv4Addr};

    /// A round over three routers and the agent: `d[i]` ms at hop i+1 (None = silent).
    fn round(d: &[Option<f64>]) -> Round {
        let n = d.len();
        Round {
            train: 1,
            answers: d
                .iter()
                .enumerate()
                .map(|(i, x)| match x {
                    None => Answer::Silent,
                    Some(ms) if i + 1 == n => Answer::Agent {
                        owd_ns: (ms * 1e6) as i64,
                    },
                    Some(ms) => Answer::Router {
                        addr: IpAddr::V4(Ipv4Addr::new(10, 0, i as u8, 1)),
                        rtt_ns: (ms * 1e6) as u64,
                        clock: HopClock::Kernel,
                    },
                })
                .collect(),
        }
    }

    const BASE: [f64; 4] = [2.0, 12.0, 22.0, 16.0];

    fn based() -> Tneck {
        let mut t = Tneck::new(TneckConfig::default()).unwrap();
        for j in 0..5 {
            let jitter = 0.05 * j as f64;
            t.handle_base(&round(
                &BASE.iter().map(|b| Some(b + jitter)).collect::<Vec<_>>(),
            ));
        }
        assert!(t.base_ready());
        t
    }

    /// The base plus `q` ms of queueing on link `link` (1-based), seen from there on.
    fn loaded(link: usize, q: f64) -> Round {
        round(
            &BASE
                .iter()
                .enumerate()
                .map(|(i, b)| Some(b + if i + 1 >= link { q } else { 0.0 }))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn the_link_where_delay_rises_is_confirmed_after_four_samples() {
        for link in 1..=4 {
            let mut t = based();
            for k in 0..3 {
                assert_eq!(t.handle_sample(&loaded(link, 3.0 + k as f64)), Ok(None));
            }
            let v = t.handle_sample(&loaded(link, 6.0)).unwrap().unwrap();
            assert_eq!(v.link, link as u8, "{v:?}");
            assert_eq!(v.samples, 4);
            assert_eq!(v.confidence, 1.0);
            assert_eq!(v.rise_ns, 5_000_000);
        }
    }

    #[test]
    fn rearmed_it_follows_a_bottleneck_that_moves() {
        let mut t = based();
        for _ in 0..4 {
            t.handle_sample(&loaded(2, 4.0)).unwrap();
        }
        assert_eq!(t.verdict().unwrap().link, 2);
        t.rearm();
        assert_eq!(t.verdict(), None);
        // The narrow link moved to 3: the next four samples confirm it, counted from the rearm.
        for k in 0..4 {
            let v = t.handle_sample(&loaded(3, 4.0)).unwrap();
            assert_eq!(v.is_some(), k == 3);
        }
        let v = t.verdict().unwrap();
        assert_eq!((v.link, v.samples, v.confidence), (3, 4, 1.0));
        assert!(t.base_ready(), "the base survives a rearm");
    }

    #[test]
    fn quiet_samples_do_not_break_a_streak_but_another_link_does() {
        let mut t = based();
        t.handle_sample(&loaded(2, 4.0)).unwrap();
        t.handle_sample(&loaded(2, 0.2)).unwrap(); // queue drained after a halving
        t.handle_sample(&loaded(2, 4.0)).unwrap();
        t.handle_sample(&loaded(3, 5.0)).unwrap(); // a burst elsewhere
        for _ in 0..3 {
            assert_eq!(t.handle_sample(&loaded(2, 4.0)).unwrap(), None);
        }
        let v = t.handle_sample(&loaded(2, 4.0)).unwrap().unwrap();
        assert_eq!((v.link, v.samples), (2, 8));
        // Six of seven pointing samples named link 2.
        assert!((v.confidence - 6.0 / 7.0).abs() < 1e-12, "{v:?}");
        assert_eq!(t.votes(), &[0, 6, 1]);
    }

    #[test]
    fn cumulative_increases_do_not_blame_the_last_link() {
        // Queueing on link 2 shows at hops 2, 3 and 4; links 3 and 4 add nothing.
        let mut t = based();
        let s = &loaded(2, 8.0);
        t.handle_sample(s).unwrap();
        let r = &t.samples()[0];
        assert_eq!(r.points_at, Some(2));
        assert_eq!(r.rises_ns[3], Some(0));
    }

    #[test]
    fn silent_hops_leave_their_links_unknown_and_no_base_is_an_error() {
        let mut t = based();
        let mut d: Vec<Option<f64>> = BASE.iter().map(|b| Some(b + 5.0)).collect();
        d[0] = None;
        t.handle_sample(&round(&d)).unwrap();
        let r = &t.samples()[0];
        // Links 1 and 2 touch the silent hop; link 3 and 4 rose by nothing.
        assert_eq!(r.rises_ns[..2], [None, None]);
        assert_eq!(r.points_at, None);

        let mut silent = Tneck::new(TneckConfig::default()).unwrap();
        for _ in 0..5 {
            silent.handle_base(&round(&[None, None, None, None]));
        }
        assert!(!silent.base_ready());
        assert_eq!(
            silent.handle_sample(&loaded(1, 3.0)),
            Err(TneckError::NoBase)
        );
    }

    #[test]
    fn small_rises_and_bad_configs() {
        let mut t = based();
        for _ in 0..10 {
            assert_eq!(t.handle_sample(&loaded(3, 0.5)).unwrap(), None);
        }
        assert!(t.samples().iter().all(|s| s.points_at.is_none()));
        let bad = |base_rounds, confirm| {
            Tneck::new(TneckConfig {
                base_rounds,
                confirm,
                ..TneckConfig::default()
            })
            .err()
        };
        assert_eq!(bad(0, 4), Some(TneckError::BaseRounds(0)));
        assert_eq!(bad(5, 0), Some(TneckError::Confirm(0)));
        assert_eq!(bad(5, 101), Some(TneckError::Confirm(101)));
    }
}

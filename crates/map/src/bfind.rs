//! A BFind-style detector (Akella, Seshan, Shaikh, IMC 2003, as seed 003 §4.1 describes it),
//! sans-IO: a UDP flow whose rate rises in steps, traceroutes during each step, and the link
//! whose queueing delay **rises with the ramp** is the bottleneck.
//!
//! The base and each sample's per-link rise are Tneck's ([`Tneck::rises_of`]): a hop's delay over
//! its idle minimum, far end minus near end. What differs is the rule. Tneck asks which link
//! shows the most delay now; BFind asks which link's delay grows as the probe pushes harder.
//! Per rate step, a link's rise is the median over the step's samples; a link whose step median
//! grew by at least [`BFindConfig::min_growth_ns`] over [`BFindConfig::steps`] consecutive steps,
//! and is at least [`BFindConfig::min_rise_ns`] above base, is named (the largest such rise if
//! two qualify at once). Queueing that cross traffic causes whatever the ramp does (a CUBIC
//! sawtooth) does not grow step after step, so it does not count; a queue the ramp fills does.
//! The number of steps (3) and the thresholds are this implementation's: the seed gives none.

use crate::tneck::{Sample, Tneck, TneckConfig, TneckError, Verdict};
use crate::trace::Round;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BFindConfig {
    /// Consecutive steps over which a link's median rise must grow.
    pub steps: u32,
    /// Least growth per step, ns.
    pub min_growth_ns: i64,
    /// Least rise over base when named, ns.
    pub min_rise_ns: i64,
}

impl Default for BFindConfig {
    fn default() -> Self {
        BFindConfig {
            steps: 3,
            min_growth_ns: 200_000,
            min_rise_ns: 1_000_000,
        }
    }
}

/// The detector's state.
#[derive(Debug, Clone)]
pub struct BFind {
    cfg: BFindConfig,
    tn: Tneck,
    samples: Vec<Sample>,
    /// The current step: its rate and its samples' rises.
    step: Option<(u64, Vec<Vec<Option<i64>>>)>,
    /// Per closed step, each link's median rise.
    medians: Vec<Vec<Option<i64>>>,
    /// Per link, consecutive steps of growth so far.
    growth: Vec<u32>,
    verdict: Option<Verdict>,
}

impl BFind {
    pub fn new(cfg: BFindConfig, base: TneckConfig) -> Result<BFind, TneckError> {
        if !(1..=100).contains(&cfg.steps) {
            return Err(TneckError::Confirm(cfg.steps));
        }
        Ok(BFind {
            cfg,
            tn: Tneck::new(base)?,
            samples: Vec::new(),
            step: None,
            medians: Vec::new(),
            growth: Vec::new(),
            verdict: None,
        })
    }

    /// The idle rounds (the base), as Tneck.
    pub fn base_detector(&mut self) -> &mut Tneck {
        &mut self.tn
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub fn verdict(&self) -> Option<Verdict> {
        self.verdict
    }

    /// One loaded round taken while the ramp sent at `rate_bps`. A new rate closes the step.
    pub fn handle_sample(
        &mut self,
        round: &Round,
        rate_bps: u64,
    ) -> Result<Option<Verdict>, TneckError> {
        if !self.tn.base().iter().any(Option::is_some) {
            return Err(TneckError::NoBase);
        }
        if self.verdict.is_some() {
            return Ok(self.verdict);
        }
        let rises = self.tn.rises_of(round);
        if self.step.as_ref().is_some_and(|(r, _)| *r != rate_bps) {
            let (_, rs) = self.step.take().expect("checked");
            self.close_step(&rs);
        }
        let step = self.step.get_or_insert((rate_bps, Vec::new()));
        step.1.push(rises.clone());
        self.samples.push(Sample {
            rises_ns: rises,
            points_at: self.verdict.map(|v| v.link),
        });
        Ok(self.verdict)
    }

    fn close_step(&mut self, rs: &[Vec<Option<i64>>]) {
        let links = rs.iter().map(Vec::len).max().unwrap_or(0);
        let med: Vec<Option<i64>> = (0..links)
            .map(|l| {
                let mut v: Vec<i64> = rs
                    .iter()
                    .filter_map(|r| r.get(l).copied().flatten())
                    .collect();
                v.sort_unstable();
                (!v.is_empty()).then(|| v[v.len() / 2])
            })
            .collect();
        if self.growth.len() < links {
            self.growth.resize(links, 0);
        }
        if let Some(prev) = self.medians.last() {
            for (l, (g, cur)) in self.growth.iter_mut().zip(&med).enumerate() {
                let grew = match (prev.get(l).copied().flatten(), *cur) {
                    (Some(p), Some(c)) => c - p >= self.cfg.min_growth_ns,
                    _ => false,
                };
                *g = if grew { *g + 1 } else { 0 };
            }
        }
        let named = (0..links)
            .filter(|&l| self.growth[l] >= self.cfg.steps)
            .filter_map(|l| med[l].map(|m| (l, m)))
            .filter(|&(_, m)| m >= self.cfg.min_rise_ns)
            .max_by_key(|&(_, m)| m);
        if let Some((l, m)) = named {
            self.verdict = Some(Verdict {
                link: l as u8 + 1,
                samples: self.samples.len() as u32,
                // Share of the steps so far in which this link had the largest median rise.
                confidence: self.share_of_max(l),
                rise_ns: m,
            });
        }
        self.medians.push(med);
    }

    fn share_of_max(&self, link: usize) -> f64 {
        let steps: Vec<&Vec<Option<i64>>> = self.medians.iter().collect();
        if steps.is_empty() {
            return 1.0;
        }
        let top = steps
            .iter()
            .filter(|m| {
                m.iter()
                    .enumerate()
                    .filter_map(|(i, x)| x.map(|x| (i, x)))
                    .max_by_key(|&(_, x)| x)
                    .is_some_and(|(i, _)| i == link)
            })
            .count();
        top as f64 / steps.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Answer;
    use mgrp_train::HopClock;
    use std::net::{IpAddr, Ipv4Addr};

    const BASE: [f64; 4] = [2.0, 12.0, 22.0, 16.0];

    /// A round: the base plus `q[k]` ms of queueing on link k+1, seen from there on.
    fn round(q: [f64; 4]) -> Round {
        let mut acc = 0.0;
        let answers = BASE
            .iter()
            .enumerate()
            .map(|(i, b)| {
                acc += q[i];
                let ms = b + acc;
                if i == 3 {
                    Answer::Agent {
                        owd_ns: (ms * 1e6) as i64,
                    }
                } else {
                    Answer::Router {
                        addr: IpAddr::V4(Ipv4Addr::new(198, 18, i as u8, 2)),
                        rtt_ns: (ms * 1e6) as u64,
                        clock: HopClock::Kernel,
                    }
                }
            })
            .collect();
        Round { train: 1, answers }
    }

    fn based() -> BFind {
        let mut b = BFind::new(BFindConfig::default(), TneckConfig::default()).unwrap();
        for _ in 0..5 {
            b.base_detector().handle_base(&round([0.0; 4]));
        }
        b
    }

    #[test]
    fn the_link_whose_delay_grows_with_the_ramp_is_named() {
        let mut b = based();
        // Link 2's queue grows 1 ms per step from step 2 on; link 3 carries a large but steady
        // queue (cross traffic's), which Tneck's rule would name.
        let mut v = None;
        for step in 0..8u64 {
            let q2 = (step as f64 - 1.0).max(0.0);
            for j in 0..5 {
                let q3 = if j % 2 == 0 { 8.0 } else { 4.0 };
                v = b
                    .handle_sample(&round([0.0, q2, q3, 0.0]), 1000 * (step + 1))
                    .unwrap();
            }
            if v.is_some() {
                break;
            }
        }
        let v = v.expect("named");
        assert_eq!(v.link, 2);
        assert!(v.confidence < 0.5, "link 3 had the larger queue: {v:?}");
    }

    #[test]
    fn steady_or_noisy_queues_name_nothing() {
        let mut b = based();
        for step in 0..10u64 {
            for j in 0..5 {
                let q3 = if (j + step) % 3 == 0 { 6.0 } else { 2.0 };
                let v = b.handle_sample(&round([0.0, 0.1, q3, 0.0]), 1000 * (step + 1));
                assert_eq!(v, Ok(None));
            }
        }
        let mut empty = BFind::new(BFindConfig::default(), TneckConfig::default()).unwrap();
        assert_eq!(
            empty.handle_sample(&round([0.0; 4]), 1),
            Err(TneckError::NoBase)
        );
        assert!(BFind::new(
            BFindConfig {
                steps: 0,
                ..Default::default()
            },
            TneckConfig::default()
        )
        .is_err());
    }
}

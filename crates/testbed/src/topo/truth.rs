//! Per-link ground truth of a topology.
//!
//! For every shaped direction (the egress of one end of a link) a sampler reads, each bin, the
//! shaper's root qdisc (bytes sent, drops, backlog) and the downstream end's foreground counter
//! (a copy of the measured pair's packets, see [`super::build::fg_counter_scripts`]). Over a
//! window: cross = (bytes that left the shaper − foreground bytes) / window, and
//! A = max(0, C_measured − cross). All bytes are Ethernet frames, the unit the shaper charges.

use super::build::{fg_counter_dev, TopoTestbed};
use super::spec::LinkDir;
use crate::capacity::{drain_rate, Drain, QueueSample};
use crate::counters::NetlinkStats;
use crate::truth::Periodic;
use crate::Error;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Cumulative counters of one shaped direction at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DirSample {
    pub sent_bytes: u64,
    pub sent_packets: u64,
    pub drops: u64,
    pub backlog_bytes: u64,
    /// Foreground frames that arrived at the downstream end.
    pub fg_bytes: u64,
}

/// Every shaped direction at one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoSample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub t_ns: u64,
    /// In the order of [`TopoTruth::links`].
    pub dirs: Vec<DirSample>,
}

/// What a shaped direction is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirInfo {
    /// `r1→r2`.
    pub label: String,
    pub link: usize,
    pub from: String,
    pub to: String,
    pub configured_bps: f64,
    /// The measured capacity (the configured one where it was not measured).
    pub capacity_bps: f64,
    pub measured: bool,
}

/// Ground truth of one shaped direction over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkBin {
    pub label: String,
    pub capacity_bps: f64,
    pub configured_capacity_bps: f64,
    /// Everything the shaper sent, per second of window.
    pub total_bps: f64,
    /// The measured pair's traffic through this direction.
    pub fg_bps: f64,
    /// total − foreground.
    pub cross_bps: f64,
    /// A = max(0, C − cross).
    pub avail_bps: f64,
    pub drops: f64,
    /// Queue backlog at the window's end.
    pub backlog_bytes: u64,
}

/// All shaped directions over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoBin {
    /// Seconds since the truth's origin.
    pub start_s: f64,
    pub end_s: f64,
    pub links: Vec<LinkBin>,
}

/// A series of samples and what they mean.
#[derive(Debug, Clone, Serialize)]
pub struct TopoTruth {
    pub links: Vec<DirInfo>,
    /// CLOCK_MONOTONIC ns that bins count from.
    pub origin_ns: u64,
    pub samples: Vec<TopoSample>,
}

impl TopoTruth {
    /// Counters interpolated at `t_ns` (clamped to the sampled span); backlog from the later
    /// sample.
    fn at(&self, t_ns: u64) -> Option<TopoSample> {
        let s = &self.samples;
        let (first, last) = (s.first()?, s.last()?);
        if t_ns <= first.t_ns {
            return Some(first.clone());
        }
        if t_ns >= last.t_ns {
            return Some(last.clone());
        }
        let i = s.partition_point(|x| x.t_ns <= t_ns);
        let (a, b) = (&s[i - 1], &s[i]);
        let f = (t_ns - a.t_ns) as f64 / (b.t_ns - a.t_ns).max(1) as f64;
        let lerp = |x: u64, y: u64| (x as f64 + (y as f64 - x as f64) * f).round() as u64;
        let dirs = a
            .dirs
            .iter()
            .zip(&b.dirs)
            .map(|(x, y)| DirSample {
                sent_bytes: lerp(x.sent_bytes, y.sent_bytes),
                sent_packets: lerp(x.sent_packets, y.sent_packets),
                drops: lerp(x.drops, y.drops),
                backlog_bytes: y.backlog_bytes,
                fg_bytes: lerp(x.fg_bytes, y.fg_bytes),
            })
            .collect();
        Some(TopoSample { t_ns, dirs })
    }

    /// Ground truth of every shaped direction over [from_ns, to_ns] (CLOCK_MONOTONIC).
    pub fn window(&self, from_ns: u64, to_ns: u64) -> Option<TopoBin> {
        let (a, b) = (self.at(from_ns)?, self.at(to_ns)?);
        let dt = b.t_ns.checked_sub(a.t_ns).filter(|d| *d > 0)? as f64 / 1e9;
        let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 * 8.0 / dt;
        let links = self
            .links
            .iter()
            .zip(a.dirs.iter().zip(&b.dirs))
            .map(|(info, (x, y))| {
                let total = rate(x.sent_bytes, y.sent_bytes);
                let fg = rate(x.fg_bytes, y.fg_bytes);
                let cross = (total - fg).max(0.0);
                LinkBin {
                    label: info.label.clone(),
                    capacity_bps: info.capacity_bps,
                    configured_capacity_bps: info.configured_bps,
                    total_bps: total,
                    fg_bps: fg,
                    cross_bps: cross,
                    avail_bps: (info.capacity_bps - cross).max(0.0),
                    drops: y.drops.saturating_sub(x.drops) as f64,
                    backlog_bytes: y.backlog_bytes,
                }
            })
            .collect();
        Some(TopoBin {
            start_s: a.t_ns.saturating_sub(self.origin_ns) as f64 / 1e9,
            end_s: b.t_ns.saturating_sub(self.origin_ns) as f64 / 1e9,
            links,
        })
    }

    /// Consecutive bins of `bin` length from the origin to the last sample.
    pub fn bins(&self, bin: Duration) -> Vec<TopoBin> {
        let step = bin.as_nanos().max(1) as u64;
        let Some(last) = self.samples.last() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut t = self.origin_ns;
        while t + step <= last.t_ns {
            out.extend(self.window(t, t + step));
            t += step;
        }
        out
    }

    /// What direction `i` drained whenever it had a backlog in the run: a second reading of
    /// its capacity, from the run itself.
    pub fn drain(&self, i: usize) -> Option<Drain> {
        let q: Vec<QueueSample> = self
            .samples
            .iter()
            .filter_map(|s| {
                let d = s.dirs.get(i)?;
                Some(QueueSample {
                    t_ns: s.t_ns,
                    sent_bytes: d.sent_bytes,
                    backlog_bytes: d.backlog_bytes,
                })
            })
            .collect();
        drain_rate(&q)
    }

    /// Index of the direction labelled `label` (`r1→r2`).
    pub fn index(&self, label: &str) -> Option<usize> {
        self.links.iter().position(|l| l.label == label)
    }
}

/// Where each direction's counters are: (namespace, ifindex) of the shaper and of the
/// foreground counter device.
struct Place {
    shaper: (String, u32),
    fg: Option<(String, u32)>,
}

/// Reads every shaped direction's counters: one netlink socket per namespace involved.
pub struct TopoCounters {
    socks: BTreeMap<String, NetlinkStats>,
    places: Vec<Place>,
}

impl TopoCounters {
    pub fn open(tb: &TopoTestbed) -> Result<Self, Error> {
        let t = tb.topology();
        let mut socks: BTreeMap<String, NetlinkStats> = BTreeMap::new();
        let mut ifindex = |ns: String, dev: &str| -> Result<(String, u32), Error> {
            if !socks.contains_key(&ns) {
                socks.insert(ns.clone(), NetlinkStats::open_in(&ns)?);
            }
            let nl = socks.get_mut(&ns).expect("just inserted");
            let idx = nl
                .links()?
                .into_iter()
                .find(|(n, _)| n == dev)
                .map(|(_, c)| c.index)
                .ok_or_else(|| Error::Counters(format!("no link {dev} in {ns}")))?;
            Ok((ns, idx))
        };
        let mut places = Vec::new();
        for d in t.shaped_dirs() {
            let shaper = ifindex(tb.ns(d.from), t.dev(d.link, d.from))?;
            let fg = match t.measure {
                Some(_) => Some(ifindex(tb.ns(d.to), &fg_counter_dev(t.dev(d.link, d.to)))?),
                None => None,
            };
            places.push(Place { shaper, fg });
        }
        Ok(TopoCounters { socks, places })
    }

    /// One sample of every direction; each namespace is read once.
    pub fn sample(&mut self) -> Result<TopoSample, Error> {
        let t0 = crate::clock::now_ns();
        let mut qdiscs = BTreeMap::new();
        let mut links = BTreeMap::new();
        for p in &self.places {
            let ns = &p.shaper.0;
            if !qdiscs.contains_key(ns) {
                let nl = self.socks.get_mut(ns).expect("opened");
                qdiscs.insert(ns.clone(), nl.root_qdiscs()?);
            }
            if let Some((ns, _)) = &p.fg {
                if !links.contains_key(ns) {
                    let nl = self.socks.get_mut(ns).expect("opened");
                    links.insert(ns.clone(), nl.links()?);
                }
            }
        }
        let t1 = crate::clock::now_ns();
        let dirs = self
            .places
            .iter()
            .map(|p| {
                let q = qdiscs[&p.shaper.0]
                    .iter()
                    .find(|q| q.ifindex == p.shaper.1)
                    .cloned()
                    .unwrap_or_default();
                let fg = p.fg.as_ref().map_or(0, |(ns, idx)| {
                    links[ns]
                        .iter()
                        .find(|(_, c)| c.index == *idx)
                        .map_or(0, |(_, c)| c.tx_bytes)
                });
                DirSample {
                    sent_bytes: q.bytes,
                    sent_packets: q.packets as u64,
                    drops: q.drops as u64,
                    backlog_bytes: q.backlog as u64,
                    fg_bytes: fg,
                }
            })
            .collect();
        Ok(TopoSample {
            t_ns: t0 + (t1 - t0) / 2,
            dirs,
        })
    }
}

/// What each shaped direction is, with its capacity.
pub fn dir_infos(tb: &TopoTestbed) -> Vec<DirInfo> {
    let t = tb.topology();
    t.shaped_dirs()
        .into_iter()
        .map(|d: LinkDir| {
            let configured = t.links[d.link]
                .shaping
                .as_ref()
                .map_or(0.0, |s| s.capacity_bps as f64);
            let cap = tb.capacity(d);
            DirInfo {
                label: t.dir_label(d),
                link: d.link,
                from: t.nodes[d.from].name.clone(),
                to: t.nodes[d.to].name.clone(),
                configured_bps: configured,
                capacity_bps: cap.map_or(configured, |c| c.bps()),
                measured: cap.is_some_and(|c| c.measured_bps.is_some()),
            }
        })
        .collect()
}

/// Reads a topology's counters on a fixed period in a background thread.
pub struct TopoTruthSampler {
    periodic: Periodic<TopoSample>,
    links: Vec<DirInfo>,
    origin_ns: u64,
}

impl TopoTruthSampler {
    /// Start sampling every `interval`; the first sample, taken before this returns, is the
    /// origin of the series.
    pub fn start(tb: &TopoTestbed, interval: Duration) -> Result<Self, Error> {
        let mut counters = TopoCounters::open(tb)?;
        let first = counters.sample()?;
        let origin_ns = first.t_ns;
        let periodic = Periodic::start("topo-truth", first, origin_ns, interval, move || {
            counters.sample()
        })?;
        Ok(TopoTruthSampler {
            periodic,
            links: dir_infos(tb),
            origin_ns,
        })
    }

    /// The truth so far.
    pub fn truth(&self) -> TopoTruth {
        TopoTruth {
            links: self.links.clone(),
            origin_ns: self.origin_ns,
            samples: self.periodic.samples(),
        }
    }

    /// Stop sampling; the final truth, or the error that ended sampling early.
    pub fn stop(mut self) -> Result<TopoTruth, Error> {
        self.periodic.finish()?;
        Ok(self.truth())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(label: &str, c: f64) -> DirInfo {
        DirInfo {
            label: label.into(),
            link: 0,
            from: "x".into(),
            to: "y".into(),
            configured_bps: c,
            capacity_bps: c * 0.98,
            measured: true,
        }
    }

    /// Two directions: one carrying `fg` + `cross` bit/s, the other idle; 100 ms samples.
    fn series(fg: f64, cross: f64, n: u64) -> TopoTruth {
        let samples = (0..=n)
            .map(|i| {
                let secs = i as f64 * 0.1;
                TopoSample {
                    t_ns: 1_000_000_000 + i * 100_000_000,
                    dirs: vec![
                        DirSample {
                            sent_bytes: ((fg + cross) * secs / 8.0) as u64,
                            fg_bytes: (fg * secs / 8.0) as u64,
                            drops: i,
                            backlog_bytes: 3000,
                            ..Default::default()
                        },
                        DirSample::default(),
                    ],
                }
            })
            .collect();
        TopoTruth {
            links: vec![info("r1→r2", 20e6), info("r2→r1", 20e6)],
            origin_ns: 1_000_000_000,
            samples,
        }
    }

    #[test]
    fn cross_is_what_left_the_shaper_minus_foreground() {
        let t = series(3e6, 5e6, 20);
        let w = t.window(1_000_000_000, 3_000_000_000).unwrap();
        let (busy, idle) = (&w.links[0], &w.links[1]);
        assert!((busy.total_bps - 8e6).abs() < 10.0, "{busy:?}");
        assert!((busy.fg_bps - 3e6).abs() < 10.0);
        assert!((busy.cross_bps - 5e6).abs() < 10.0);
        assert!((busy.avail_bps - (19.6e6 - 5e6)).abs() < 10.0);
        assert_eq!(busy.drops, 20.0);
        assert_eq!(idle.cross_bps, 0.0);
        assert!((idle.avail_bps - 19.6e6).abs() < 1e-6);
        // Between samples the counters are interpolated.
        let w = t.window(1_050_000_000, 1_250_000_000).unwrap();
        assert!((w.links[0].cross_bps - 5e6).abs() < 1e3, "{w:?}");
        assert!((w.start_s - 0.05).abs() < 1e-9);
    }

    #[test]
    fn bins_and_drain() {
        let t = series(1e6, 1e6, 30);
        let b = t.bins(Duration::from_millis(500));
        assert_eq!(b.len(), 6);
        assert!(b.iter().all(|b| (b.links[0].cross_bps - 1e6).abs() < 1e3));
        // Backlogged throughout: the drain is what it sent.
        let d = t.drain(0).unwrap();
        assert!((d.bps - 2e6).abs() < 1e3, "{d:?}");
        assert!(t.drain(1).is_none());
        assert_eq!(t.index("r2→r1"), Some(1));
    }
}

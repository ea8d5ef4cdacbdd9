//! Calibration of `auto`'s range and confidence (issue 20): what the stated [low, high] and
//! confidence mean, measured on the fluid model over many seeds and every cross kind it has.

use crate::slops::{Evidence, Vote};

/// How far the evidence of one `auto` run agreed, 0..1, before calibration: the share of
/// streams that agreed with their fleet's verdict, halved for every contradiction a
/// verification fleet found, times the agreement between the chirps' rough value (sampled
/// earlier, by other means) and the final value, 1 − |rough − value| / C. Disagreeing fleets,
/// a re-test that moved the bracket, and A that moved between the phases all lower it.
pub fn raw_score(ev: &Evidence, rough_bps: Option<f64>, value_bps: f64, capacity_bps: f64) -> f64 {
    let agree = if ev.voted == 0 {
        0.0
    } else {
        1.0 - ev.dissent as f64 / ev.voted as f64
    };
    let phases = rough_bps.map_or(0.5, |r| {
        1.0 - ((r - value_bps).abs() / capacity_bps.max(1.0)).min(1.0)
    });
    (agree * 0.5f64.powi(ev.contradictions as i32) * phases).clamp(0.0, 1.0)
}

/// Raw score bands (lower edges) and the share of final ranges that held the truth at their
/// stated time scale in each, on the fluid model: 200 seeds × 22 cells (20 and 100 Mbit/s;
/// CBR, Poisson, on/off 50 ms and 500 ms, STEP ±50% every 1 s; 25/50/75% load, without the
/// four overloaded cells), MTU cross packets, made non-decreasing (pooled where a higher band
/// held less), over the runs that ended with the search (4221; those that went on to the time
/// average state [`TIMEAVG_HELD`]). Regenerate: `cargo test --release -p mgrp-estimate --lib calib::study::table
/// -- --ignored --nocapture`.
pub const TABLE: [(f64, f64); 12] = [
    (0.00, 0.03),
    (0.05, 0.73),
    (0.10, 0.78),
    (0.20, 0.78),
    (0.30, 0.78),
    (0.40, 0.78),
    (0.50, 0.88),
    (0.60, 0.88),
    (0.70, 0.88),
    (0.80, 0.88),
    (0.90, 0.88),
    (0.95, 0.88),
];

/// The share of time-average ranges ([`crate::timeavg`], `auto:timeavg`) that held the truth
/// at their stated time scale on the fluid model: 579 runs of the defined cells, seeds
/// 1..=200, held 0.995 (printed by `calib::study::table`).
pub const TIMEAVG_HELD: f64 = 0.99;

/// The calibrated confidence of a raw score: the measured share of ranges that held the truth
/// among runs with a score in the same band.
pub fn confidence(raw: f64) -> f64 {
    TABLE
        .iter()
        .rev()
        .find(|(lo, _)| raw >= *lo)
        .map_or(0.0, |(_, p)| *p)
}

/// The share of streams sent at each rate that did not rise, made non-increasing in the rate
/// (pool-adjacent-violators, weighted by streams), with the anchors "everything fits at 0" and
/// "nothing fits at `max_rate`": the estimated distribution of A over the instants the streams
/// were sent (share of instants when A exceeded the rate). Points: (rate, share, streams).
pub fn share_below(votes: &[Vote], max_rate: f64) -> Vec<(f64, f64, f64)> {
    let mut pts: Vec<(f64, f64, f64)> = votes
        .iter()
        .filter(|v| v.increasing + v.not_increasing > 0 && v.rate > 0.0 && v.rate < max_rate)
        .map(|v| {
            let n = (v.increasing + v.not_increasing) as f64;
            (v.rate, v.not_increasing as f64 / n, n)
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Pool adjacent violators: a block is (first rate, last rate, share, weight).
    let mut blocks: Vec<(usize, usize, f64, f64)> = Vec::new();
    for (i, p) in pts.iter().enumerate() {
        blocks.push((i, i, p.1, p.2));
        while blocks.len() > 1 {
            let b = blocks[blocks.len() - 1];
            let a = blocks[blocks.len() - 2];
            if a.2 >= b.2 {
                break;
            }
            let w = a.3 + b.3;
            blocks.pop();
            *blocks.last_mut().unwrap() = (a.0, b.1, (a.2 * a.3 + b.2 * b.3) / w, w);
        }
    }
    for (first, last, share, _) in blocks {
        for p in &mut pts[first..=last] {
            p.1 = share;
        }
    }
    let mut out = vec![(0.0, 1.0, 0.0)];
    out.extend(pts);
    out.push((max_rate, 0.0, 0.0));
    out
}

/// What the decided fleets prove, each with the slack of what its streams could detect: a
/// fleet saying "below" at R shows A > R − δ, "above" A < R + δ; the tightest of each. When
/// they cross (a "below" above an "above": fleets contradicting each other), the range spans
/// both fleets with their slack.
pub fn delta_bounds(votes: &[Vote], max_rate: f64) -> (f64, f64) {
    let below = votes
        .iter()
        .filter(|v| v.not_increasing > v.increasing)
        .map(|v| (v.rate - v.delta, v.rate + v.delta))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    let above = votes
        .iter()
        .filter(|v| v.increasing > v.not_increasing)
        .map(|v| (v.rate + v.delta, v.rate - v.delta))
        .fold((max_rate, max_rate), |a, b| if b.0 < a.0 { b } else { a });
    let (lo, hi) = if below.0 <= above.0 {
        (below.0, above.0)
    } else {
        (above.1.min(below.0), below.1.max(above.0))
    };
    (lo.max(0.0), hi.min(max_rate))
}

/// The mean of A over the streams' instants, ∫ share_below(r) dr, with the bounds that hold
/// whatever the share does between two sampled rates (it can only fall): (low, mean, high).
pub fn mean_over_streams(votes: &[Vote], max_rate: f64) -> (f64, f64, f64) {
    mean_over_streams_trimmed(votes, max_rate, 0.0)
}

/// [`mean_over_streams`] with the shares stretched away from the trend test's error rate
/// `trim`: s → (s − trim) / (1 − 2·trim), clipped to 0..1. A share of ½ (fleets that saw two
/// phases) stays; the few false rises of streams well below A no longer pull the mean down.
pub fn mean_over_streams_trimmed(votes: &[Vote], max_rate: f64, trim: f64) -> (f64, f64, f64) {
    let mut pts = share_below(votes, max_rate);
    if trim > 0.0 {
        for p in &mut pts {
            p.1 = ((p.1 - trim) / (1.0 - 2.0 * trim)).clamp(0.0, 1.0);
        }
    }
    let (mut lo, mut mid, mut hi) = (0.0, 0.0, 0.0);
    for w in pts.windows(2) {
        let dr = w[1].0 - w[0].0;
        lo += dr * w[1].1;
        hi += dr * w[0].1;
        mid += dr * (w[0].1 + w[1].1) / 2.0;
    }
    (lo, mid, hi)
}

/// The median of A over the streams' instants: the rate where [`share_below`] crosses ½.
/// Unlike the mean, a few false rises of streams far below A (a queue's transient under
/// bursty cross traffic, a receiver's stall) move it only as far as they move the crossing.
pub fn median_over_streams(votes: &[Vote], max_rate: f64) -> f64 {
    rate_at_share(&share_below(votes, max_rate), 0.5)
}

/// How wide a rate band the share curve takes to fall from 0.7 to 0.3: narrow where one A was
/// seen through noise, wide on a plateau (A took two values). NaN without both crossings.
pub fn share_band(pts: &[(f64, f64, f64)]) -> f64 {
    rate_at_share(pts, 0.3) - rate_at_share(pts, 0.7)
}

/// The rate where a non-increasing share curve (points as [`share_below`] gives them, linear
/// between) crosses `level`: the middle of the stretch that sits exactly at it, if any.
pub fn rate_at_share(pts: &[(f64, f64, f64)], level: f64) -> f64 {
    let cross = |w: &[(f64, f64, f64)]| {
        let (r0, s0, r1, s1) = (w[0].0, w[0].1, w[1].0, w[1].1);
        if s0 == s1 {
            r0
        } else {
            r0 + (s0 - level) / (s0 - s1) * (r1 - r0)
        }
    };
    let first = pts
        .windows(2)
        .find(|w| w[0].1 > level && w[1].1 <= level)
        .map(cross);
    let last = pts
        .windows(2)
        .rev()
        .find(|w| w[0].1 >= level && w[1].1 < level)
        .map(cross);
    match (first, last) {
        (Some(a), Some(b)) => (a + b) / 2.0,
        _ => f64::NAN,
    }
}

#[cfg(test)]
pub(crate) mod study {
    use crate::auto::{Auto, AutoParams};
    use crate::fluid::{drive, FluidPath, Host, Linger};
    use crate::slops::Evidence;
    use crate::Estimate;
    use mgrp_traffic::CrossPattern;

    /// A study's cell and seed count from `CELL` (capacity in Mbit/s, kind, load %) and
    /// `SEEDS`: (the cell as given, C in bit/s, load, seeds).
    pub fn env_cell(default: &str, default_seeds: u64) -> (String, f64, u32, u64) {
        let cell = std::env::var("CELL").unwrap_or(default.into());
        let f: Vec<&str> = cell.split(',').collect();
        let c: f64 = f[0].parse::<f64>().expect("CELL=Mbit,kind,load") * 1e6;
        let load: u32 = f[2].parse().expect("CELL=Mbit,kind,load");
        let seeds = std::env::var("SEEDS").map_or(default_seeds, |s| s.parse().expect("SEEDS=n"));
        (cell, c, load, seeds)
    }

    /// The cells of `mgrp bench accuracy`, as the fluid model can run them (MTU-sized cross
    /// packets, the bench's default).
    /// Judge against the truth at the stated time scale (`CALIB_TRUTH=run`: over the whole run).
    fn by_scale() -> bool {
        std::env::var("CALIB_TRUTH").map_or(true, |v| v != "run")
    }

    /// Judge as `mgrp bench accuracy` does (`CALIB_TRUTH=delivered`): against C − the cross
    /// traffic delivered (it differs from C − offered only where the queue dropped cross
    /// traffic: on/off and STEP at 75% load), over at least the last 500 ms.
    pub fn delivered_truth() -> bool {
        std::env::var("CALIB_TRUTH").is_ok_and(|v| v == "delivered")
    }

    pub fn pattern(kind: &str, load: u32, c: f64, seed: u64) -> Option<CrossPattern> {
        let r = c * load as f64 / 100.0;
        let mb = |x: f64| format!("{:.3}mbit", x / 1e6);
        let spec = match kind {
            "cbr" => format!("cbr:{}", mb(r)),
            "poisson" => format!("poisson:{},seed={seed}", mb(r)),
            "onoff" => format!("onoff:{},on=50ms,off=50ms,seed={seed}", mb(r)),
            "onoff500" => format!("onoff:{},on=500ms,off=500ms,seed={seed}", mb(r)),
            "step" => format!("step:{},{},{},every=1s", mb(r), mb(1.5 * r), mb(0.5 * r)),
            _ => return None,
        };
        Some(CrossPattern::parse(&spec).unwrap())
    }

    #[derive(Debug, Clone)]
    pub struct Outcome {
        pub cell: String,
        pub c: f64,
        pub truth: f64,
        pub est: Estimate,
        pub ev: Evidence,
        pub votes: Vec<crate::slops::Vote>,
        pub rough: f64,
        /// Trains reported with a probe missing, and those reported before a dropped probe
        /// could have arrived ([`FluidPath::stragglers_cut`]).
        pub lossy_reports: u64,
        pub stragglers_cut: u64,
        /// The time average's streams (rate, reading), when the run took it.
        pub samples: Vec<(f64, Option<f64>)>,
        /// The search's streams that met a saturated link: their rates.
        pub saturated_rates: Vec<f64>,
        /// The search's own value (before any time average).
        pub search_bps: f64,
    }

    impl Outcome {
        pub fn covered(&self) -> bool {
            self.est.low_bps <= self.truth && self.truth <= self.est.high_bps
        }
        /// The run ended with the time average (its confidence is [`super::TIMEAVG_HELD`],
        /// not the raw score's).
        pub fn timeavg(&self) -> bool {
            self.est.quality.method == "auto:timeavg"
        }
        pub fn err(&self) -> f64 {
            (self.est.value_bps - self.truth).abs() / self.truth.max(0.05 * self.c)
        }
    }

    /// One run of `auto`; `None` when it ended without a SLoPS estimate (the capacity phase
    /// found nothing: every train lost on an overloaded path).
    pub fn one(c: f64, kind: &str, load: u32, seed: u64, p: AutoParams) -> Option<Outcome> {
        one_on(
            c,
            kind,
            load,
            seed,
            p,
            host_from_env(seed),
            delivered_truth(),
        )
    }

    /// The testbed's features to add to the model (`HOST=linger,pfifo,short,jitter=200us` or
    /// `HOST=testbed`; none by default; `adaptive`: the agent's wait for stragglers since
    /// calib6 instead of the fixed linger).
    pub fn host_from_env(seed: u64) -> Host {
        host_from(&std::env::var("HOST").unwrap_or_default(), seed)
    }

    /// A [`Host`] from a list of features (see [`host_from_env`]).
    pub fn host_from(spec: &str, seed: u64) -> Host {
        let mut h = Host {
            seed,
            ..Host::default()
        };
        for f in spec.split(',').filter(|f| !f.is_empty()) {
            match f {
                "none" => {}
                "testbed" => {
                    h = Host {
                        seed,
                        ..Host::testbed()
                    }
                }
                "linger" => h.report_linger_ns = Some(300_000_000),
                "adaptive" => {
                    h.report_linger_ns = h.report_linger_ns.or(Some(300_000_000));
                    h.linger = Linger::Adaptive;
                }
                "pfifo" => h.packet_limit = Some(100),
                "short" => h.prop_ns = Some(50_000),
                // A fixed linger of another length (`linger=20ms`).
                _ if f.starts_with("linger=") => {
                    let ms: u64 = f[7..].trim_end_matches("ms").parse().expect("linger=N(ms)");
                    h.report_linger_ns = Some(ms * 1_000_000);
                }
                // The cross generator's stalls (`stall=1000us/20ms`: 1 ms stalls 20 ms apart on
                // average, [`Host::cross_stall_ns`]).
                _ if f.starts_with("stall=") => {
                    let (d, every) = f[6..].split_once('/').expect("stall=Nus/Mms");
                    let us: u64 = d.trim_end_matches("us").parse().expect("stall=N(us)");
                    let ms: u64 = every.trim_end_matches("ms").parse().expect("/M(ms)");
                    h.cross_stall_ns = us * 1000;
                    h.cross_stall_every_ns = ms * 1_000_000;
                }
                _ if f.starts_with("jitter=") => {
                    let us: u64 = f[7..].trim_end_matches("us").parse().expect("jitter=N(us)");
                    h.rx_jitter_ns = us * 1000;
                }
                _ => panic!("HOST: unknown feature {f}"),
            }
        }
        h
    }

    /// [`one`] on a path with `host`'s features; `bench_truth`: judged as the bench judges
    /// ([`delivered_truth`]).
    pub fn one_on(
        c: f64,
        kind: &str,
        load: u32,
        seed: u64,
        p: AutoParams,
        host: Host,
        bench_truth: bool,
    ) -> Option<Outcome> {
        let cross = pattern(kind, load, c, seed);
        let mut path = FluidPath::new(c, 100.0 * 1514.0, 10_000_000, cross)
            .unwrap()
            .with_host(host);
        path.idle_until(500_000_000 + seed * 7_654_321 % 1_000_000_000);
        let t0 = path.now_ns();
        let mut a = Auto::new(p);
        let out = drive(&mut a, &mut path, t0 + 60_000_000_000);
        let end = path.now_ns();
        let truth_run = path.avail_bps(t0, end);
        let scale_ns = out
            .last()
            .and_then(|(_, e)| e.quality.timescale_ms)
            .map_or(end - t0, |ms| (ms * 1e6) as u64);
        let truth_scale = if bench_truth {
            // The bench's window is at least 500 ms (its sampler's resolution).
            let scale_ns = scale_ns.max(500_000_000);
            path.avail_delivered_bps(end.saturating_sub(scale_ns), end)
        } else {
            path.avail_bps(end.saturating_sub(scale_ns), end)
        };
        let truth = if by_scale() { truth_scale } else { truth_run };
        let cell = format!("{}/{kind}/{load}", c / 1e6);
        let (Some((_, est)), Some(ev)) = (out.last(), a.evidence()) else {
            eprintln!("{cell} seed {seed}: no SLoPS estimate");
            return None;
        };
        Some(Outcome {
            cell,
            c,
            truth,
            est: est.clone(),
            ev,
            votes: a.votes().to_vec(),
            rough: a.rough().map_or(f64::NAN, |r| r.value_bps),
            lossy_reports: path.lossy_reports,
            stragglers_cut: path.stragglers_cut,
            samples: a.timeavg().map_or(Vec::new(), |t| t.samples()),
            saturated_rates: a.saturated_rates().to_vec(),
            search_bps: a.search_value().unwrap_or(f64::NAN),
        })
    }

    pub const KINDS: [&str; 5] = ["cbr", "poisson", "onoff", "onoff500", "step"];

    /// Capacities and loads of the grid (`CAPS=100`, `LOADS=50,75` narrow it).
    fn env_list<T: std::str::FromStr + Copy>(name: &str, default: &[T]) -> Vec<T> {
        std::env::var(name).map_or(default.to_vec(), |v| {
            v.split(',').map(|x| x.parse().ok().expect(name)).collect()
        })
    }

    pub fn grid(seeds: u64, kinds: &[&str], p: AutoParams) -> Vec<Outcome> {
        let mut v = Vec::new();
        for c in env_list("CAPS", &[20.0, 100.0])
            .into_iter()
            .map(|c: f64| c * 1e6)
        {
            for kind in kinds {
                for load in env_list("LOADS", &[25u32, 50, 75]) {
                    for seed in 1..=seeds {
                        v.extend(one(c, kind, load, seed, p));
                    }
                }
            }
        }
        v
    }

    pub fn q(mut v: Vec<f64>, p: f64) -> f64 {
        v.sort_by(f64::total_cmp);
        crate::stats::quantile(&v, p).unwrap_or(f64::NAN)
    }

    pub fn summary(runs: &[Outcome]) {
        let mut cells: Vec<String> = runs.iter().map(|r| r.cell.clone()).collect();
        cells.dedup();
        for cell in cells.iter().chain(std::iter::once(&"ALL".to_string())) {
            let r: Vec<&Outcome> = runs
                .iter()
                .filter(|r| cell == "ALL" || &r.cell == cell)
                .collect();
            let n = r.len() as f64;
            let cov = r.iter().filter(|o| o.covered()).count() as f64 / n;
            let errs: Vec<f64> = r.iter().map(|o| o.err()).collect();
            let width: Vec<f64> = r
                .iter()
                .map(|o| (o.est.high_bps - o.est.low_bps) / o.c)
                .collect();
            eprintln!(
                "{cell:>18} n {n:>4} cover {cov:.2} med {:.3} p90 {:.3} max {:.3} width/C {:.3} conf {:.2} kB {:.0} s {:.2}",
                q(errs.clone(), 0.5),
                q(errs.clone(), 0.9),
                q(errs, 1.0),
                q(width, 0.5),
                q(r.iter().map(|o| o.est.quality.confidence).collect(), 0.5),
                q(r.iter().map(|o| o.est.quality.probe_bytes as f64 / 1e3).collect(), 0.5),
                q(r.iter().map(|o| o.est.quality.elapsed_s).collect(), 0.5),
            );
        }
    }

    /// Before and after, per cell, 200 seeds: `cargo test --release -p mgrp-estimate --lib
    /// calib::study::coverage -- --ignored --nocapture` (judged at the stated time scale;
    /// `CALIB_TRUTH=run` over the whole run).
    #[test]
    #[ignore]
    fn coverage() {
        let before = AutoParams {
            timescale_ns: 0,
            calibrated: false,
            ..AutoParams::default()
        };
        eprintln!("--- before (pathload's bracket ± w, back-to-back fleets)");
        summary(&grid(200, &KINDS, before));
        eprintln!("--- now");
        summary(&grid(200, &KINDS, AutoParams::default()));
    }

    /// The cells whose truth the model defines: cross traffic below C at every moment (at 75%
    /// load on/off peaks at 1.5·C and STEP's high level at 1.125·C; the queue then drops and
    /// "C − offered" is not what is available).
    pub fn defined(o: &Outcome) -> bool {
        !(o.cell.ends_with("/75") && (o.cell.contains("onoff") || o.cell.contains("step")))
    }

    pub fn bands(runs: &[Outcome], score: impl Fn(&Outcome) -> f64, edges: &[f64]) {
        for w in edges.windows(2) {
            let r: Vec<&Outcome> = runs
                .iter()
                .filter(|o| (w[0]..w[1]).contains(&score(o)))
                .collect();
            let k = r.iter().filter(|o| o.covered()).count();
            eprintln!(
                "  [{:.2}, {:.2}) n {:>5} held {:.3}",
                w[0],
                w[1],
                r.len(),
                k as f64 / r.len().max(1) as f64
            );
        }
    }

    pub const EDGES: [f64; 12] = [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95];

    fn raw(o: &Outcome) -> f64 {
        super::raw_score(
            &o.ev,
            Some(o.rough).filter(|r| r.is_finite()),
            o.est.value_bps,
            o.c,
        )
    }

    /// Per band: (runs, ranges that held the truth).
    pub fn tally(runs: &[Outcome]) -> Vec<(usize, usize)> {
        let mut t = vec![(0, 0); EDGES.len()];
        for o in runs {
            let b = EDGES.iter().rposition(|e| raw(o) >= *e).unwrap_or(0);
            t[b].0 += 1;
            t[b].1 += o.covered() as usize;
        }
        t
    }

    /// The calibration table ([`super::TABLE`]) from seeds 1..=200: coverage per raw-score band,
    /// pooled (pool-adjacent-violators) where a higher band held less.
    #[test]
    #[ignore]
    fn table() {
        let all: Vec<Outcome> = grid(200, &KINDS, AutoParams::default())
            .into_iter()
            .filter(defined)
            .collect();
        let (runs, timeavg): (Vec<Outcome>, Vec<Outcome>) =
            all.into_iter().partition(|o| !o.timeavg());
        eprintln!(
            "time-average runs {} held {:.3} (TIMEAVG_HELD)",
            timeavg.len(),
            timeavg.iter().filter(|o| o.covered()).count() as f64 / timeavg.len().max(1) as f64
        );
        let t = tally(&runs);
        // Pool adjacent violators, weighted by runs: blocks of (first band, last band, held, n).
        let mut blocks: Vec<(usize, usize, usize, usize)> = Vec::new();
        for (i, (n, k)) in t.iter().enumerate() {
            blocks.push((i, i, *k, *n));
            while blocks.len() > 1 {
                let b = blocks[blocks.len() - 1];
                let a = blocks[blocks.len() - 2];
                let share = |x: (usize, usize, usize, usize)| x.2 as f64 / x.3.max(1) as f64;
                if a.3 > 0 && b.3 > 0 && share(a) <= share(b) {
                    break;
                }
                blocks.pop();
                *blocks.last_mut().unwrap() = (a.0, b.1, a.2 + b.2, a.3 + b.3);
            }
        }
        eprintln!(
            "runs {} held {:.3}",
            runs.len(),
            runs.iter().filter(|o| o.covered()).count() as f64 / runs.len() as f64
        );
        for (i, (n, k)) in t.iter().enumerate() {
            eprintln!(
                "  band {:.2}: n {n:>5} held {:.3}",
                EDGES[i],
                *k as f64 / (*n).max(1) as f64
            );
        }
        eprintln!("pub const TABLE: [(f64, f64); {}] = [", EDGES.len());
        for (first, last, k, n) in blocks {
            for e in &EDGES[first..=last] {
                eprintln!("    ({e:.2}, {:.2}),", k as f64 / n.max(1) as f64);
            }
        }
        eprintln!("];");
    }

    #[test]
    #[ignore]
    fn raw_scores() {
        let runs: Vec<Outcome> = grid(100, &KINDS, AutoParams::default())
            .into_iter()
            .filter(defined)
            .collect();
        let edges = [
            0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.01,
        ];
        eprintln!("confidence as today");
        bands(&runs, |o| o.est.quality.confidence, &edges);
        eprintln!("agreement only");
        bands(
            &runs,
            |o| 1.0 - o.ev.dissent as f64 / o.ev.voted.max(1) as f64,
            &edges,
        );
        eprintln!("1 - |rough - value| / C");
        bands(
            &runs,
            |o| 1.0 - (o.rough - o.est.value_bps).abs() / o.c,
            &edges,
        );
        let mut cells: Vec<String> = runs.iter().map(|o| o.cell.clone()).collect();
        cells.dedup();
        for c in cells {
            let m = runs.iter().filter(|o| o.cell == c && !o.covered()).count();
            eprint!("{c}: {m} missed; ");
        }
        eprintln!();
        let with_rough: Vec<Outcome> = runs
            .iter()
            .map(|o| {
                let mut o = o.clone();
                let w = 0.03 * o.c;
                o.est.low_bps = o.est.low_bps.min(o.rough - w).max(0.0);
                o.est.high_bps = o.est.high_bps.max(o.rough + w).min(o.c);
                o
            })
            .collect();
        eprintln!("--- range ∪ rough ± w");
        summary(&with_rough);
        eprintln!("--- now");
        summary(&runs);
        eprintln!("product: today's confidence × rough agreement");
        bands(
            &runs,
            |o| o.est.quality.confidence * (1.0 - (o.rough - o.est.value_bps).abs() / o.c),
            &edges,
        );
        eprintln!("product: agreement × rough agreement");
        bands(
            &runs,
            |o| {
                (1.0 - o.ev.dissent as f64 / o.ev.voted.max(1) as f64)
                    * 0.5f64.powi(o.ev.contradictions as i32)
                    * (1.0 - (o.rough - o.est.value_bps).abs() / o.c)
            },
            &edges,
        );
        eprintln!("width / C");
        bands(&runs, |o| (o.est.high_bps - o.est.low_bps) / o.c, &edges);
    }

    /// The standing-queue evidence on and off, per cell: `SEEDS=40 KINDS=onoff,onoff500
    /// cargo test --release -p mgrp-estimate --lib calib::study::queue_effect -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn queue_effect() {
        let seeds: u64 = std::env::var("SEEDS").map_or(40, |s| s.parse().unwrap());
        let kinds = std::env::var("KINDS").unwrap_or("cbr,poisson,onoff,onoff500,step".into());
        let kinds: Vec<&str> = kinds.split(',').collect();
        let variants = [
            ("main (no queue evidence, no time average)", false, 0),
            ("queue evidence", true, 0),
            (
                "queue evidence + time average when A alternates",
                true,
                1_000_000_000,
            ),
        ];
        for (name, queue, span) in variants {
            eprintln!("--- {name}");
            let runs = grid(
                seeds,
                &kinds,
                AutoParams {
                    queue,
                    timeavg_span_ns: span,
                    ..AutoParams::default()
                },
            );
            summary(&runs);
            let mut cells: Vec<String> = runs.iter().map(|r| r.cell.clone()).collect();
            cells.dedup();
            for c in cells {
                let r: Vec<&Outcome> = runs.iter().filter(|o| o.cell == c).collect();
                let ta = r
                    .iter()
                    .filter(|o| o.est.quality.method == "auto:timeavg")
                    .count();
                let wild = r.iter().filter(|o| o.err() > 0.5).count();
                let why = |f: &dyn Fn(&&&Outcome) -> bool| {
                    r.iter()
                        .filter(|o| o.est.quality.method == "auto:timeavg")
                        .filter(f)
                        .count()
                };
                let contra = why(&|o| {
                    let (w, t) = crate::timeavg::contradicting_streams(&o.votes, o.c);
                    w >= 3 && w as f64 >= 0.2 * t as f64
                });
                let retest = why(&|o| o.ev.contradictions > 0);
                let sat = why(&|o| o.ev.saturated > 0);
                eprint!(
                    "{c}: ta {ta} (votes {contra} retest {retest} saturated {sat}) wild {wild}; "
                );
            }
            eprintln!();
            let defined: Vec<&Outcome> = runs.iter().filter(|o| defined(o)).collect();
            let wild = defined.iter().filter(|o| o.err() > 0.5).count();
            let held = defined.iter().filter(|o| o.covered()).count();
            eprintln!(
                "defined cells: > 50% off {wild} of {}, held {held}",
                defined.len()
            );
        }
    }

    /// Which of the testbed's features reproduce its misses (calib5): each [`Host`] feature
    /// alone and together, per cell, `auto` as merged: `SEEDS=20 CAPS=100 LOADS=50,75
    /// KINDS=onoff500 cargo test --release -p mgrp-estimate --lib calib::study::host_effect --
    /// --ignored --nocapture`.
    #[test]
    #[ignore]
    fn host_effect() {
        let seeds: u64 = std::env::var("SEEDS").map_or(20, |s| s.parse().unwrap());
        let kinds = std::env::var("KINDS").unwrap_or("onoff500".into());
        let kinds: Vec<&str> = kinds.split(',').collect();
        // Each feature alone, then together; `HOSTS=testbed;testbed,jitter=50us` runs those.
        let hosts = std::env::var("HOSTS").unwrap_or(
            "none;pfifo;jitter=50us;linger;short;short,jitter=50us;short,linger,jitter=50us;testbed;testbed,jitter=50us"
                .into(),
        );
        let variants: Vec<&str> = hosts.split(';').collect();
        // `FIXES=calib4,left,trap`: the time average's weightings to compare.
        let fixes = std::env::var("FIXES").unwrap_or("calib4".into());
        for name in variants {
            let host = |seed| host_from(name, seed);
            for fix in fixes.split(',') {
                eprintln!("--- {name} / {fix}");
                let p = fix_params(fix);
                let mut runs = Vec::new();
                for c in env_list("CAPS", &[100.0]).into_iter().map(|c: f64| c * 1e6) {
                    for kind in &kinds {
                        for load in env_list("LOADS", &[50u32, 75]) {
                            for seed in 1..=seeds {
                                runs.extend(one_on(
                                    c,
                                    kind,
                                    load,
                                    seed,
                                    p,
                                    host(seed),
                                    delivered_truth(),
                                ));
                            }
                        }
                    }
                }
                report_cells(&runs);
            }
        }
    }

    /// The time average's weighting over the whole grid (`HOST`, `CALIB_TRUTH`, `CAPS`,
    /// `LOADS`, `KINDS` as elsewhere): `SEEDS=200 FIXES=calib4,trap cargo test --release -p
    /// mgrp-estimate --lib calib::study::fix_effect -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn fix_effect() {
        let seeds: u64 = std::env::var("SEEDS").map_or(40, |s| s.parse().unwrap());
        let kinds = std::env::var("KINDS").unwrap_or("cbr,poisson,onoff,onoff500,step".into());
        let kinds: Vec<&str> = kinds.split(',').collect();
        let fixes = std::env::var("FIXES").unwrap_or("calib4,trap".into());
        for fix in fixes.split(',') {
            eprintln!(
                "--- {fix} (HOST={:?})",
                std::env::var("HOST").unwrap_or_default()
            );
            let runs = grid(seeds, &kinds, fix_params(fix));
            report_cells(&runs);
            let defined: Vec<&Outcome> = runs.iter().filter(|o| defined(o)).collect();
            let ta: Vec<&&Outcome> = defined.iter().filter(|o| o.timeavg()).collect();
            eprintln!(
                "defined cells: {} runs, held {}, > 50% off {}; time average {} runs, held {}; median kB {:.0}, final s {:.2}",
                defined.len(),
                defined.iter().filter(|o| o.covered()).count(),
                defined.iter().filter(|o| o.err() > 0.5).count(),
                ta.len(),
                ta.iter().filter(|o| o.covered()).count(),
                q(defined.iter().map(|o| o.est.quality.probe_bytes as f64 / 1e3).collect(), 0.5),
                q(defined.iter().map(|o| o.est.quality.elapsed_s).collect(), 0.5),
            );
            let all_ta: Vec<&Outcome> = runs.iter().filter(|o| o.timeavg()).collect();
            eprintln!(
                "all cells: {} runs, held {}, > 50% off {}; time average {} runs, held {}",
                runs.len(),
                runs.iter().filter(|o| o.covered()).count(),
                runs.iter().filter(|o| o.err() > 0.5).count(),
                all_ta.len(),
                all_ta.iter().filter(|o| o.covered()).count(),
            );
        }
    }

    /// The agent's fixed 300 ms linger against its wait for stragglers (calib6), each with
    /// the time average's equal and trapezoid weights, over the grid (`CAPS`, `LOADS`,
    /// `KINDS` as elsewhere): `SEEDS=200 CALIB_TRUTH=delivered cargo test --release -p
    /// mgrp-estimate --lib calib::study::linger_effect -- --ignored --nocapture`
    /// (`HOSTS=a;b` and `FIXES=calib4,trap` choose the variants).
    #[test]
    #[ignore]
    fn linger_effect() {
        let seeds: u64 = std::env::var("SEEDS").map_or(10, |s| s.parse().unwrap());
        let kinds = std::env::var("KINDS").unwrap_or("cbr,poisson,onoff,onoff500,step".into());
        let kinds: Vec<&str> = kinds.split(',').collect();
        let hosts = std::env::var("HOSTS")
            .unwrap_or("testbed,jitter=50us;testbed,jitter=50us,adaptive".into());
        let fixes = std::env::var("FIXES").unwrap_or("calib4,trap".into());
        for name in hosts.split(';') {
            for fix in fixes.split(',') {
                eprintln!("--- {name} / {fix}");
                let p = fix_params(fix);
                let mut runs = Vec::new();
                for c in env_list("CAPS", &[20.0, 100.0])
                    .into_iter()
                    .map(|c: f64| c * 1e6)
                {
                    for kind in &kinds {
                        for load in env_list("LOADS", &[25u32, 50, 75]) {
                            for seed in 1..=seeds {
                                let host = host_from(name, seed);
                                runs.extend(one_on(
                                    c,
                                    kind,
                                    load,
                                    seed,
                                    p,
                                    host,
                                    delivered_truth(),
                                ));
                            }
                        }
                    }
                }
                linger_cells(&runs);
            }
        }
    }

    /// One cell's runs under two hosts, seed by seed where they differ: `CELL=100,onoff500,50
    /// HOSTS="testbed,jitter=50us;testbed,jitter=50us,adaptive" cargo test --release -p
    /// mgrp-estimate --lib calib::study::linger_seeds -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn linger_seeds() {
        let (cell, c, load, seeds) = env_cell("100,onoff500,50", 40);
        let f: Vec<&str> = cell.split(',').collect();
        let hosts = std::env::var("HOSTS")
            .unwrap_or("testbed,jitter=50us;testbed,jitter=50us,adaptive".into());
        let hosts: Vec<&str> = hosts.split(';').collect();
        let show = |o: &Outcome| {
            format!(
                "{} truth {:.1} est {:.1} [{:.1},{:.1}] {} s {:.2} lossy {}",
                if o.covered() { "held" } else { "MISS" },
                o.truth / 1e6,
                o.est.value_bps / 1e6,
                o.est.low_bps / 1e6,
                o.est.high_bps / 1e6,
                o.est.quality.method,
                o.est.quality.elapsed_s,
                o.lossy_reports
            )
        };
        for seed in 1..=seeds {
            let runs: Vec<Option<Outcome>> = hosts
                .iter()
                .map(|h| {
                    one_on(
                        c,
                        f[1],
                        load,
                        seed,
                        AutoParams::default(),
                        host_from(h, seed),
                        delivered_truth(),
                    )
                })
                .collect();
            let (Some(a), Some(b)) = (&runs[0], &runs[1]) else {
                continue;
            };
            if a.covered() != b.covered() || (a.err() > 0.5) != (b.err() > 0.5) {
                eprintln!("seed {seed}\n  {}\n  {}", show(a), show(b));
            }
        }
    }

    /// Per cell and over the defined cells: held, > 50% off, time averages held, median and
    /// p90 final time, median bytes, lossy reports and stragglers cut.
    pub fn linger_cells(runs: &[Outcome]) {
        let mut cells: Vec<String> = runs.iter().map(|r| r.cell.clone()).collect();
        cells.dedup();
        let line = |name: &str, r: &[&Outcome]| {
            let ta: Vec<&&Outcome> = r.iter().filter(|o| o.timeavg()).collect();
            let secs = || {
                r.iter()
                    .map(|o| o.est.quality.elapsed_s)
                    .collect::<Vec<f64>>()
            };
            let errs = || r.iter().map(|o| o.err()).collect::<Vec<f64>>();
            eprintln!(
                "{name:>18}: n {} held {} >50% off {} err {:.3} p90 {:.3} | timeavg {} held {} | final s {:.2} p90 {:.2} | kB {:.0} | lossy {} cut {}",
                r.len(),
                r.iter().filter(|o| o.covered()).count(),
                r.iter().filter(|o| o.err() > 0.5).count(),
                q(errs(), 0.5),
                q(errs(), 0.9),
                ta.len(),
                ta.iter().filter(|o| o.covered()).count(),
                q(secs(), 0.5),
                q(secs(), 0.9),
                q(r.iter().map(|o| o.est.quality.probe_bytes as f64 / 1e3).collect(), 0.5),
                r.iter().map(|o| o.lossy_reports).sum::<u64>(),
                r.iter().map(|o| o.stragglers_cut).sum::<u64>(),
            );
        };
        for cell in &cells {
            let r: Vec<&Outcome> = runs.iter().filter(|o| &o.cell == cell).collect();
            line(cell, &r);
        }
        for kind in KINDS {
            let k = format!("/{kind}/");
            let r: Vec<&Outcome> = runs
                .iter()
                .filter(|o| defined(o) && o.cell.contains(&k))
                .collect();
            if !r.is_empty() {
                line(&format!("defined {kind}"), &r);
            }
        }
        let defined: Vec<&Outcome> = runs.iter().filter(|o| defined(o)).collect();
        line("DEFINED", &defined);
        let all: Vec<&Outcome> = runs.iter().collect();
        line("ALL", &all);
    }

    /// `auto` with the time average weighted as `fix` says: `calib4` (equal weights), `left` /
    /// `trap` (gap share 1 / ½, the default) or a share.
    pub fn fix_params(fix: &str) -> AutoParams {
        match fix {
            // The search leaving streams that watched a queue drain without a verdict, and
            // split fleets not starting the time average.
            "calib7" => {
                return AutoParams {
                    drained_below: false,
                    split_alternates: false,
                    ..AutoParams::default()
                }
            }
            "drained" => {
                return AutoParams {
                    split_alternates: false,
                    ..AutoParams::default()
                }
            }
            "split" => {
                return AutoParams {
                    drained_below: false,
                    ..AutoParams::default()
                }
            }
            _ => {}
        }
        if fix == "calib6" {
            // The time average counting a standing queue as risen (before calib7).
            return AutoParams {
                timeavg_plateau: true,
                ..AutoParams::default()
            };
        }
        let gap_share = match fix {
            "calib4" => None,
            "left" => Some(1.0),
            "trap" => Some(0.5),
            other => Some(other.parse().expect("FIXES: calib4, left, trap or a share")),
        };
        AutoParams {
            timeavg_gap_share: gap_share,
            ..AutoParams::default()
        }
    }

    /// Per cell: ranges held, > 50% off, and the runs that ended with the time average (how
    /// many, held, their median estimate and truth, in units of C).
    pub fn report_cells(runs: &[Outcome]) {
        let mut cells: Vec<String> = runs.iter().map(|r| r.cell.clone()).collect();
        cells.dedup();
        for cell in cells {
            let r: Vec<&Outcome> = runs.iter().filter(|o| o.cell == cell).collect();
            let ta: Vec<&&Outcome> = r.iter().filter(|o| o.timeavg()).collect();
            let med = |v: Vec<f64>| q(v, 0.5);
            eprintln!(
                "{cell:>16}: n {} held {} >50% off {} | timeavg {} held {} est/C {:.2} truth/C {:.2} scale s {:.2}",
                r.len(),
                r.iter().filter(|o| o.covered()).count(),
                r.iter().filter(|o| o.err() > 0.5).count(),
                ta.len(),
                ta.iter().filter(|o| o.covered()).count(),
                med(ta.iter().map(|o| o.est.value_bps / o.c).collect()),
                med(ta.iter().map(|o| o.truth / o.c).collect()),
                med(ta.iter().map(|o| o.est.quality.timescale_ms.unwrap_or(0.0) / 1e3).collect()),
            );
        }
    }

    /// Runs of one cell in detail: `CELL=20,onoff500,50 cargo test --release -p mgrp-estimate
    /// --lib calib::study::cell_detail -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cell_detail() {
        let cell = std::env::var("CELL").unwrap_or("20,onoff500,50".into());
        let f: Vec<&str> = cell.split(',').collect();
        let c: f64 = f[0].parse::<f64>().unwrap() * 1e6;
        let load: u32 = f[2].parse().unwrap();
        for queue in [false, true] {
            eprintln!("--- queue {queue}");
            for seed in 1..=6 {
                let p = AutoParams {
                    queue,
                    ..AutoParams::default()
                };
                let Some(o) = one(c, f[1], load, seed, p) else {
                    continue;
                };
                eprintln!(
                    "seed {seed} truth {:.2} est {:.2} [{:.2},{:.2}] rough {:.2} queued {} scale {:?} votes {:?}",
                    o.truth / 1e6,
                    o.est.value_bps / 1e6,
                    o.est.low_bps / 1e6,
                    o.est.high_bps / 1e6,
                    o.rough / 1e6,
                    o.ev.queued,
                    o.est.quality.timescale_ms.map(|t| t.round()),
                    o.votes
                        .iter()
                        .map(|v| ((v.rate / 1e5).round() / 10.0, v.increasing, v.not_increasing))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    /// Why a cell goes to the time average and what its streams read (calib7):
    /// `CELL=20,poisson,75 SEEDS=10 HOST=testbed,adaptive,jitter=50us CALIB_TRUTH=delivered
    /// cargo test --release -p mgrp-estimate --lib calib::study::timeavg_detail -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn timeavg_detail() {
        let (cell, c, load, seeds) = env_cell("20,poisson,75", 10);
        let f: Vec<&str> = cell.split(',').collect();
        for seed in 1..=seeds {
            let Some(o) = one(c, f[1], load, seed, AutoParams::default()) else {
                continue;
            };
            let (wrong, total) = crate::timeavg::contradicting_streams(&o.votes, c);
            eprintln!(
                "seed {seed} truth {:.2} est {:.2} [{:.2},{:.2}] {} err {:.2} wrong {wrong}/{total} saturated {}/{}",
                o.truth / 1e6,
                o.est.value_bps / 1e6,
                o.est.low_bps / 1e6,
                o.est.high_bps / 1e6,
                o.est.quality.method,
                o.err(),
                o.ev.saturated,
                o.ev.voted,
            );
            eprintln!(
                "   search {:.2} saturated at {:?}",
                o.search_bps / 1e6,
                o.saturated_rates
                    .iter()
                    .map(|r| (r / 1e5).round() / 10.0)
                    .collect::<Vec<_>>()
            );
            let mut s = o.samples.clone();
            s.sort_by(|a, b| a.0.total_cmp(&b.0));
            let line: String = s
                .iter()
                .map(|(_, x)| match x {
                    Some(v) if *v == 1.0 => '.',
                    Some(v) if *v == 0.0 => 'R',
                    Some(_) => '?',
                    None => ' ',
                })
                .collect();
            if !s.is_empty() {
                eprintln!("   rates 0..C: [{line}]");
            }
        }
    }

    /// One line per run of the grid (`CAPS`, `LOADS`, `KINDS`, `SEEDS`, `HOST`), for offline
    /// analysis (onoff8): cell, seed, method, held, error, truth, estimate and range, the
    /// search's evidence and its fleets (rate, rose, flat, slack), all rates in Mbit/s.
    #[test]
    #[ignore]
    fn dump() {
        let seeds: u64 = std::env::var("SEEDS").map_or(20, |s| s.parse().unwrap());
        let kinds = std::env::var("KINDS").unwrap_or("cbr,poisson,onoff,onoff500,step".into());
        let fix = std::env::var("FIX").unwrap_or("trap".into());
        let p = fix_params(&fix);
        for c in env_list("CAPS", &[20.0, 100.0])
            .into_iter()
            .map(|c: f64| c * 1e6)
        {
            for kind in kinds.split(',') {
                for load in env_list("LOADS", &[25u32, 50, 75]) {
                    for seed in 1..=seeds {
                        let Some(o) = one(c, kind, load, seed, p) else {
                            continue;
                        };
                        let m = |x: f64| (x / 1e4).round() / 100.0;
                        println!(
                            "{} {seed} {} {} {:.4} {} {} {} {} {} {} {} {} {:.3} {} {}",
                            o.cell,
                            o.est.quality.method,
                            o.covered() as u8,
                            o.err(),
                            m(o.truth),
                            m(o.est.value_bps),
                            m(o.est.low_bps),
                            m(o.est.high_bps),
                            m(o.search_bps),
                            o.ev.greys,
                            o.ev.saturated,
                            o.ev.voted,
                            o.est.quality.elapsed_s,
                            o.est.quality.probe_bytes,
                            o.votes
                                .iter()
                                .map(|v| format!(
                                    "{}:{}:{}:{}",
                                    m(v.rate),
                                    v.increasing,
                                    v.not_increasing,
                                    m(v.delta)
                                ))
                                .collect::<Vec<_>>()
                                .join(","),
                        );
                    }
                }
            }
        }
    }

    /// Every train of one run: `CELL=100,onoff500,50,1 cargo test --release -p mgrp-estimate
    /// --lib calib::study::trains -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn trains() {
        let cell = std::env::var("CELL").unwrap_or("100,onoff500,50,1".into());
        let f: Vec<&str> = cell.split(',').collect();
        let c: f64 = f[0].parse::<f64>().unwrap() * 1e6;
        let (load, seed): (u32, u64) = (f[2].parse().unwrap(), f[3].parse().unwrap());
        let cross = pattern(f[1], load, c, seed);
        let mut path = crate::fluid::FluidPath::new(c, 100.0 * 1514.0, 10_000_000, cross)
            .unwrap()
            .with_host(host_from_env(seed));
        path.idle_until(500_000_000 + seed * 7_654_321 % 1_000_000_000);
        let mut a = Auto::new(AutoParams::default());
        crate::fluid::drive_with(&mut a, &mut path, 60_000_000_000, |t, r| {
            let owd = crate::queue::comparable_owds(r, c);
            let lo = owd.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = owd.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let tr = crate::trend::stream_trend(&owd, r.stats.sent, &Default::default());
            eprintln!(
                "t {:>6.1} ms n {:>3} rate {:>6.1} lost {:>3} owd {:>6.2}..{:>6.2} ms {:?}",
                r.start_mono_ns.0 as f64 / 1e6,
                t.probes.len(),
                crate::slops::stream_rate(t) / 1e6,
                r.lost(),
                (lo - 10e6) / 1e6,
                (hi - 10e6) / 1e6,
                tr
            );
        });
        eprintln!("{:?} {:?}", crate::Estimator::estimate(&a), a.evidence());
    }

    /// calib8, rejected: [`super::mean_over_streams`] with the share held at 1 below what the decided fleets prove
    /// (`delta_bounds`' low end) and at 0 above its high end: the tails of the pool outside the
    /// proven range hold only the trend test's false verdicts.
    pub fn mean_within_proven(votes: &[crate::slops::Vote], max_rate: f64) -> (f64, f64, f64) {
        let (dlo, dhi) = super::delta_bounds(votes, max_rate);
        let inside: Vec<crate::slops::Vote> = votes
            .iter()
            .filter(|v| v.rate > dlo && v.rate < dhi)
            .copied()
            .collect();
        let inner = super::share_below(&inside, max_rate);
        let mut pts: Vec<(f64, f64)> = vec![(0.0, 1.0), (dlo, 1.0)];
        pts.extend(inner[1..inner.len() - 1].iter().map(|(r, s, _)| (*r, *s)));
        pts.push((dhi, 0.0));
        pts.push((max_rate, 0.0));
        let (mut lo, mut mid, mut hi) = (0.0, 0.0, 0.0);
        for w in pts.windows(2) {
            let dr = w[1].0 - w[0].0;
            lo += dr * w[1].1;
            hi += dr * w[0].1;
            mid += dr * (w[0].1 + w[1].1) / 2.0;
        }
        (lo, mid, hi)
    }

    /// The signed error of a value read another way from a run's fleets (`alt`), for a run
    /// that ended with an uncontradicted search; any other run keeps its value.
    pub fn signed_alt(o: &Outcome, alt: impl Fn(&Outcome) -> f64) -> f64 {
        let v = if o.timeavg() || o.ev.contradictions > 0 {
            o.est.value_bps
        } else {
            alt(o)
        };
        (v - o.truth) / o.truth.max(0.05 * o.c)
    }

    fn print_signed(label: &str, v: &[f64]) {
        let abs: Vec<f64> = v.iter().map(|x| x.abs()).collect();
        eprintln!(
            "{label}: signed p10 {:+.3} med {:+.3} p90 {:+.3} | err {:.3} p90 {:.3} >50% {}",
            q(v.to_vec(), 0.1),
            q(v.to_vec(), 0.5),
            q(v.to_vec(), 0.9),
            q(abs.clone(), 0.5),
            q(abs.clone(), 0.9),
            abs.iter().filter(|x| **x > 0.5).count(),
        );
    }

    /// Signed error per cell (calib8: does the search end low?) and, with `DETAIL=1`, each
    /// run's fleets in order (rate Mbit/s, rose, flat, δ): `CAPS=100 KINDS=poisson LOADS=25
    /// SEEDS=40 HOST=testbed,adaptive,jitter=50us CALIB_TRUTH=delivered cargo test --release
    /// -p mgrp-estimate --lib calib::study::bias -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn bias() {
        let seeds: u64 = std::env::var("SEEDS").map_or(40, |s| s.parse().unwrap());
        let kinds = std::env::var("KINDS").unwrap_or("cbr,poisson,step".into());
        let kinds: Vec<&str> = kinds.split(',').collect();
        let detail = std::env::var("DETAIL").is_ok();
        let floor: f64 = std::env::var("FLOOR").map_or(0.0, |s| s.parse().unwrap());
        let runs = grid(
            seeds,
            &kinds,
            AutoParams {
                rise_floor: floor,
                median: None,
                share_trim: std::env::var("TRIM").map_or(0.0, |s| s.parse().unwrap()),
                trend: match std::env::var("PAPER").ok().as_deref() {
                    Some("mid") => crate::trend::TrendParams {
                        pct_increasing: 0.63,
                        pct_not: 0.52,
                        pdt_increasing: 0.50,
                        pdt_not: 0.40,
                        ..Default::default()
                    },
                    Some(_) => crate::trend::TrendParams::paper(),
                    None => Default::default(),
                },
                ..AutoParams::default()
            },
        );
        let mut cells: Vec<String> = runs.iter().map(|r| r.cell.clone()).collect();
        cells.dedup();
        for cell in &cells {
            let r: Vec<&Outcome> = runs.iter().filter(|o| &o.cell == cell).collect();
            let signed: Vec<f64> = r
                .iter()
                .map(|o| (o.est.value_bps - o.truth) / o.truth.max(0.05 * o.c))
                .collect();
            let missed_low = r.iter().filter(|o| o.est.high_bps < o.truth).count();
            let missed_high = r.iter().filter(|o| o.est.low_bps > o.truth).count();
            let errs: Vec<f64> = r.iter().map(|o| o.err()).collect();
            // The value read within what the fleets prove.
            let alt: Vec<f64> = r
                .iter()
                .map(|o| signed_alt(o, |o| mean_within_proven(&o.votes, o.c).1))
                .collect();
            // The median where the central band (shares 0.7 → 0.3) is narrower than `band` of
            // C and median − mean lies in (lo, hi) of C, for each `band/lo/hi` of `GATES`.
            let gates =
                std::env::var("GATES").unwrap_or("0.2/-0.08/0.08,0.2/0/1,1/0/1,0.3/0/0.2".into());
            for gd in gates.split(',') {
                let f: Vec<f64> = gd.split('/').map(|x| x.parse().unwrap()).collect();
                let (g, dlo, dhi) = (f[0], f[1], f[2]);
                let med: Vec<f64> = r
                    .iter()
                    .map(|o| {
                        signed_alt(o, |o| {
                            let pts = super::share_below(&o.votes, o.c);
                            let band = super::share_band(&pts);
                            let m = super::rate_at_share(&pts, 0.5);
                            let d = m - o.est.value_bps;
                            let gated = band < g * o.c && d > dlo * o.c && d < dhi * o.c;
                            if gated {
                                m
                            } else {
                                o.est.value_bps
                            }
                        })
                    })
                    .collect();
                print_signed(&format!("{cell:>16}  median<{gd}"), &med);
            }
            print_signed(&format!("{cell:>16}  proven"), &alt);
            eprintln!(
                "{cell:>16}: n {} signed p10 {:+.3} med {:+.3} p90 {:+.3} | err {:.3} p90 {:.3} >50% {} | held {} missed low {missed_low} high {missed_high} | s {:.2} kB {:.0}",
                r.len(),
                q(signed.clone(), 0.1),
                q(signed.clone(), 0.5),
                q(signed, 0.9),
                q(errs.clone(), 0.5),
                q(errs.clone(), 0.9),
                errs.iter().filter(|e| **e > 0.5).count(),
                r.iter().filter(|o| o.covered()).count(),
                q(r.iter().map(|o| o.est.quality.elapsed_s).collect(), 0.5),
                q(r.iter().map(|o| o.est.quality.probe_bytes as f64 / 1e3).collect(), 0.5),
            );
            if !detail {
                continue;
            }
            for o in &r {
                eprintln!(
                    "  truth {:.1} est {:.1} [{:.1},{:.1}] {} search {:.1} rough {:.1} fleets {:?}",
                    o.truth / 1e6,
                    o.est.value_bps / 1e6,
                    o.est.low_bps / 1e6,
                    o.est.high_bps / 1e6,
                    o.est.quality.method,
                    o.search_bps / 1e6,
                    o.rough / 1e6,
                    o.votes
                        .iter()
                        .map(|v| (
                            (v.rate / 1e5).round() / 10.0,
                            v.increasing,
                            v.not_increasing,
                            (v.delta / 1e5).round() / 10.0
                        ))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    /// Per run, what the median gate sees (band and median − mean, of C) and the signed error
    /// of both values: `CELLS=20,onoff,75;100,cbr,25 SEEDS=100 … calib::study::gate_scan`.
    #[test]
    #[ignore]
    fn gate_scan() {
        let seeds: u64 = std::env::var("SEEDS").map_or(100, |s| s.parse().unwrap());
        let cells = std::env::var("CELLS").unwrap_or("20,onoff,75;100,cbr,25".into());
        for cell in cells.split(';') {
            let f: Vec<&str> = cell.split(',').collect();
            let c: f64 = f[0].parse::<f64>().unwrap() * 1e6;
            let load: u32 = f[2].parse().unwrap();
            for seed in 1..=seeds {
                let p = AutoParams {
                    median: None,
                    ..AutoParams::default()
                };
                let Some(o) = one(c, f[1], load, seed, p) else {
                    continue;
                };
                if o.timeavg() || o.ev.contradictions > 0 {
                    continue;
                }
                let pts = super::share_below(&o.votes, o.c);
                let band = super::share_band(&pts);
                let m = super::rate_at_share(&pts, 0.5);
                let e = |v: f64| (v - o.truth) / o.truth.max(0.05 * o.c);
                eprintln!(
                    "GATE {cell} {seed} band {:.3} diff {:+.3} mean {:+.3} median {:+.3}",
                    band / o.c,
                    (m - o.est.value_bps) / o.c,
                    e(o.est.value_bps),
                    e(m)
                );
            }
        }
    }

    /// Every SLoPS stream of a cell's runs against the truth (calib8): per band of (R − A)/C,
    /// the share that read "rose" and the rise of their delays (last group median − first) in
    /// MTU service times: `CELL=100,poisson,25 SEEDS=40 HOST=testbed,adaptive,jitter=50us
    /// cargo test --release -p mgrp-estimate --lib calib::study::rises -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn rises() {
        let (cell, c, load, seeds) = env_cell("100,poisson,25", 40);
        let f: Vec<&str> = cell.split(',').collect();
        let mtu_ns = 1514.0 * 8.0 / c * 1e9;
        // (R − A)/C, rose (trend), rise in MTU times, stream length in ms
        let mut all: Vec<(f64, bool, f64, f64)> = Vec::new();
        for seed in 1..=seeds {
            let cross = pattern(f[1], load, c, seed);
            let mut path = crate::fluid::FluidPath::new(c, 100.0 * 1514.0, 10_000_000, cross)
                .unwrap()
                .with_host(host_from_env(seed));
            path.idle_until(500_000_000 + seed * 7_654_321 % 1_000_000_000);
            let a_true = c * (1.0 - load as f64 / 100.0);
            let mut a = Auto::new(AutoParams::default());
            crate::fluid::drive_with(&mut a, &mut path, 60_000_000_000, |t, r| {
                if t.probes.len() != 50 {
                    return;
                }
                let owd = crate::queue::comparable_owds(r, c);
                if owd.len() < 8 {
                    return;
                }
                let g = crate::trend::group_medians(&owd, 7);
                let rise = (g[g.len() - 1] - g[0]) / mtu_ns;
                let tr = crate::trend::stream_trend(&owd, r.stats.sent, &Default::default());
                let len_ms = t.offsets().last().copied().unwrap_or(0) as f64 / 1e6;
                all.push((
                    (crate::slops::stream_rate(t) - a_true) / c,
                    tr == crate::trend::Trend::Increasing,
                    rise,
                    len_ms,
                ));
            });
        }
        let edges = [
            -1.0, -0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2, 1.0,
        ];
        for w in edges.windows(2) {
            let b: Vec<&(f64, bool, f64, f64)> =
                all.iter().filter(|x| x.0 >= w[0] && x.0 < w[1]).collect();
            if b.is_empty() {
                continue;
            }
            let rose: Vec<f64> = b.iter().filter(|x| x.1).map(|x| x.2).collect();
            eprintln!(
                "(R-A)/C {:+.2}..{:+.2}: n {:>4} rose {:.2} | rise of risen, MTU: p10 {:.1} med {:.1} p90 {:.1} | all rises med {:.1} | len ms {:.1}",
                w[0],
                w[1],
                b.len(),
                rose.len() as f64 / b.len() as f64,
                q(rose.clone(), 0.1),
                q(rose.clone(), 0.5),
                q(rose, 0.9),
                q(b.iter().map(|x| x.2).collect(), 0.5),
                q(b.iter().map(|x| x.3).collect(), 0.5),
            );
        }
    }

    /// The output-rate reading (calib8 idea): a stream that kept the bottleneck busy from its
    /// second probe to its last gives A = C + R − C·Δout/Δin exactly (FIFO). Per band of
    /// (R − A)/C: the share of streams that look busy (every probe after the first queued
    /// `MARGIN_US` above the run's floor) and their reading's error; per run, the median over
    /// its busy streams against the truth. `CELL=100,poisson,25 SEEDS=40
    /// HOST=testbed,adaptive,jitter=50us cargo test --release -p mgrp-estimate --lib
    /// calib::study::busy -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn busy() {
        let (cell, c, load, seeds) = env_cell("100,poisson,25", 40);
        let f: Vec<&str> = cell.split(',').collect();
        let margin: f64 = std::env::var("MARGIN_US").map_or(100.0, |s| s.parse().unwrap()) * 1e3;
        let a_true = c * (1.0 - load as f64 / 100.0);
        let mut all: Vec<(f64, bool, f64)> = Vec::new();
        let mut run_errs = Vec::new();
        for seed in 1..=seeds {
            let cross = pattern(f[1], load, c, seed);
            let mut path = crate::fluid::FluidPath::new(c, 100.0 * 1514.0, 10_000_000, cross)
                .unwrap()
                .with_host(host_from_env(seed));
            path.idle_until(500_000_000 + seed * 7_654_321 % 1_000_000_000);
            let mut a = Auto::new(AutoParams::default());
            let mut streams: Vec<(f64, Vec<f64>, f64)> = Vec::new();
            let mut floor = f64::INFINITY;
            crate::fluid::drive_with(&mut a, &mut path, 60_000_000_000, |t, r| {
                let owd = crate::queue::comparable_owds(r, c);
                floor = owd.iter().copied().fold(floor, f64::min);
                if t.probes.len() != 50 || r.probes.iter().any(|p| p.rx_ns.is_none()) {
                    return;
                }
                let (p0, pn) = (&r.probes[0], &r.probes[r.probes.len() - 1]);
                let din = (pn.tx_real_ns.0 - p0.tx_real_ns.0) as f64;
                let dout = (pn.rx_ns.unwrap().0 - p0.rx_ns.unwrap().0) as f64;
                let rate = crate::slops::stream_rate(t);
                streams.push((rate, owd, c + rate - c * dout / din));
            });
            let truth = path.avail_bps(0, path.now_ns());
            let mut busy_vals = Vec::new();
            for (rate, owd, ab) in streams {
                let busy = owd[1..].iter().all(|d| d - floor > margin);
                all.push(((rate - a_true) / c, busy, (ab - a_true) / c));
                if busy {
                    busy_vals.push(ab);
                }
            }
            if !busy_vals.is_empty() {
                run_errs.push((q(busy_vals.clone(), 0.5) - truth) / c);
            }
            let _ = truth;
        }
        let edges = [-1.0, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2, 1.0];
        for w in edges.windows(2) {
            let b: Vec<&(f64, bool, f64)> =
                all.iter().filter(|x| x.0 >= w[0] && x.0 < w[1]).collect();
            if b.is_empty() {
                continue;
            }
            let busy: Vec<f64> = b.iter().filter(|x| x.1).map(|x| x.2).collect();
            eprintln!(
                "(R-A)/C {:+.2}..{:+.2}: n {:>4} busy {:.2} | (A_out - A)/C p10 {:+.3} med {:+.3} p90 {:+.3}",
                w[0],
                w[1],
                b.len(),
                busy.len() as f64 / b.len() as f64,
                q(busy.clone(), 0.1),
                q(busy.clone(), 0.5),
                q(busy, 0.9),
            );
        }
        eprintln!(
            "runs {}: median of busy readings − truth, /C: p10 {:+.3} med {:+.3} p90 {:+.3}",
            run_errs.len(),
            q(run_errs.clone(), 0.1),
            q(run_errs.clone(), 0.5),
            q(run_errs, 0.9)
        );
    }

    #[test]
    #[ignore]
    fn coverage_today() {
        let runs = grid(40, &KINDS, AutoParams::default());
        summary(&runs);
        for o in runs
            .iter()
            .filter(|o| !o.covered() && o.cell.contains("poisson"))
            .take(12)
        {
            eprintln!(
                "{} truth {:.2} est {:.2} [{:.2},{:.2}] ev {:?} votes {:?}",
                o.cell,
                o.truth / 1e6,
                o.est.value_bps / 1e6,
                o.est.low_bps / 1e6,
                o.est.high_bps / 1e6,
                o.ev,
                o.votes
                    .iter()
                    .map(|v| (
                        (v.rate / 1e5).round() / 10.0,
                        v.increasing,
                        v.not_increasing
                    ))
                    .collect::<Vec<_>>()
            );
        }
        // Variants of the range computed from the same runs.
        let w = 0.03;
        for (name, f) in [
            ("integral", 0),
            ("integral±w", 1),
            ("union", 2),
            ("mean as value", 3),
            ("delta", 4),
            ("delta ∪ integral±w", 5),
            ("delta ∪ integral±w, mean", 6),
        ] {
            let v: Vec<Outcome> = runs
                .iter()
                .map(|o| {
                    let mut o = o.clone();
                    let (lo, mid, hi) = super::mean_over_streams(&o.votes, o.c);
                    let m = if f == 0 { 0.0 } else { w * o.c };
                    let (a, b) = ((lo - m).max(0.0), (hi + m).min(o.c));
                    let (dl, dh) = super::delta_bounds(&o.votes, o.c);
                    match f {
                        4 => {
                            o.est.low_bps = dl;
                            o.est.high_bps = dh;
                        }
                        5 | 6 => {
                            o.est.low_bps = dl.min(a);
                            o.est.high_bps = dh.max(b);
                            if f == 6 {
                                o.est.value_bps = mid;
                            }
                        }
                        2 => {
                            o.est.low_bps = o.est.low_bps.min(a);
                            o.est.high_bps = o.est.high_bps.max(b);
                        }
                        3 => {
                            o.est.value_bps = mid;
                            o.est.low_bps = a;
                            o.est.high_bps = b;
                        }
                        _ => {
                            o.est.low_bps = a;
                            o.est.high_bps = b;
                        }
                    }
                    o
                })
                .collect();
            eprintln!("--- {name}");
            summary(&v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::study::{
        defined, grid, host_from, one, one_on, q, signed_alt, tally, Outcome, EDGES, KINDS,
    };
    use super::*;
    use crate::auto::AutoParams;
    use crate::fluid::Host;

    fn share(runs: &[Outcome]) -> f64 {
        runs.iter().filter(|o| o.covered()).count() as f64 / runs.len().max(1) as f64
    }

    /// Runs of `cells` (C, kind, load) on the testbed-like model, seeds 1..=40, judged as the
    /// bench judges.
    fn testbed_like(cells: &[(f64, &str, u32)], p: AutoParams) -> Vec<Outcome> {
        cells
            .iter()
            .flat_map(|&(c, kind, load)| {
                (1..=40).filter_map(move |seed| {
                    let host = host_from("testbed,adaptive,jitter=50us", seed);
                    one_on(c, kind, load, seed, p, host, true)
                })
            })
            .collect()
    }

    /// Issue 20's coverage target on the fluid model, 200 seeds × 12 cells (CBR and Poisson of
    /// MTU packets, 25/50/75% load, 20 and 100 Mbit/s: 2400 runs), judged against the truth at
    /// the stated time scale. Measured 0.981 (lowest cell 0.93, Poisson 75% at 100 Mbit/s;
    /// 0.978 before the standing-queue evidence, 20 Mbit/s Poisson 75% 0.920 → 0.955);
    /// pathload's bracket ± w with fleets back to back (before) 0.868. The model is deterministic for a seed, so the share
    /// is exact, not sampled: the assertion is the target itself, and "before" must miss it.
    #[test]
    fn ranges_hold_the_truth_over_many_seeds() {
        let smooth = ["cbr", "poisson"];
        let now = grid(200, &smooth, AutoParams::default());
        let before = grid(
            200,
            &smooth,
            AutoParams {
                calibrated: false,
                timescale_ns: 0,
                ..AutoParams::default()
            },
        );
        assert_eq!(now.len(), 2400);
        let (cov, cov_before) = (share(&now), share(&before));
        eprintln!("coverage {cov:.3}, before {cov_before:.3}");
        assert!(cov >= 0.90, "coverage {cov}");
        assert!(cov_before < 0.90, "the test separates: before {cov_before}");
        // No cell far below the target either.
        let mut cells: Vec<&str> = now.iter().map(|o| o.cell.as_str()).collect();
        cells.dedup();
        for c in cells {
            let r: Vec<Outcome> = now.iter().filter(|o| o.cell == c).cloned().collect();
            eprintln!("  {c}: {:.3}", share(&r));
            assert!(share(&r) >= 0.85, "{c}: {}", share(&r));
        }
    }

    /// The testbed's miss (calib5): at 100 Mbit/s on/off 500 ms the time average read 78–99
    /// Mbit/s against 48–58 in all 14 testbed runs that took it. Reproduced on the model with
    /// the testbed's features (`fluid::Host::testbed()`: the agent reports a train that lost a
    /// probe 300 ms late, a 50 µs path, pfifo of 100 packets; plus 50 µs of receive-stamp
    /// jitter, which sends the short path's search to the time average), judged as the bench
    /// judges: equal weights hold in almost no run, weights by the time each stream stands for
    /// in almost all. 200 seeds per cell (`calib::study::fix_effect`): equal weights held 6 of
    /// 131 and 0 of 126 time averages, the trapezoid weights 127 and 125. The model is
    /// deterministic for a seed: the bounds (≤ 20%, ≥ 90% of 40 seeds' time averages) are
    /// those shares with room for the 40 seeds drawn, and fail if either side moves.
    #[test]
    fn time_average_holds_when_lossy_reports_come_late() {
        let host = |seed| Host {
            rx_jitter_ns: 50_000,
            seed,
            ..Host::testbed()
        };
        let held = |gap_share: Option<f64>| -> (usize, usize) {
            let p = AutoParams {
                timeavg_gap_share: gap_share,
                ..AutoParams::default()
            };
            let runs: Vec<Outcome> = [50, 75]
                .into_iter()
                .flat_map(|load| {
                    (1..=40).filter_map(move |seed| {
                        one_on(100e6, "onoff500", load, seed, p, host(seed), true)
                    })
                })
                .filter(|o| o.timeavg())
                .collect();
            (runs.iter().filter(|o| o.covered()).count(), runs.len())
        };
        let (equal, n_equal) = held(None);
        let (now, n_now) = held(AutoParams::default().timeavg_gap_share);
        eprintln!("time averages held: equal weights {equal}/{n_equal}, now {now}/{n_now}");
        assert!(
            n_now >= 30 && n_equal >= 30,
            "the cells take the time average"
        );
        assert!(
            equal * 5 <= n_equal,
            "the miss reproduces: {equal}/{n_equal}"
        );
        assert!(now * 10 >= n_now * 9, "and is fixed: {now}/{n_now}");
    }

    /// The agent's wait for stragglers (calib6, `fluid::Linger::Adaptive`) on the cells whose
    /// queue is deepest (20 Mbit/s, 100 MTU packets: 60 ms) and whose trains lose most
    /// (on/off 500 ms at 50% and 75%), testbed-like model, seeds 1..=40: no report comes
    /// before a dropped probe could have arrived, where a fixed 20 ms wait cuts such
    /// stragglers (the test separates); and runs end sooner than with the fixed 300 ms.
    /// Measured (`calib::study::linger_effect`, 200 seeds): 0 cut of 2439 lossy reports
    /// against 201 of 3441 with 20 ms; median final 2.96 → 2.65 s (50%), 4.90 → 3.13 s (75%).
    /// Deterministic for a seed: the bounds are the 40 seeds' own figures with the sign that
    /// matters (none cut; some cut; sooner).
    #[test]
    fn the_wait_for_stragglers_cuts_none_and_ends_runs_sooner() {
        let runs = |spec: &str| -> Vec<Outcome> {
            [50, 75]
                .into_iter()
                .flat_map(|load| {
                    (1..=40).filter_map(move |seed| {
                        let host = super::study::host_from(spec, seed);
                        one_on(
                            20e6,
                            "onoff500",
                            load,
                            seed,
                            AutoParams::default(),
                            host,
                            true,
                        )
                    })
                })
                .collect()
        };
        let tally = |r: &[Outcome]| {
            let mut secs: Vec<f64> = r.iter().map(|o| o.est.quality.elapsed_s).collect();
            secs.sort_by(f64::total_cmp);
            (
                r.iter().map(|o| o.lossy_reports).sum::<u64>(),
                r.iter().map(|o| o.stragglers_cut).sum::<u64>(),
                crate::stats::quantile(&secs, 0.5).unwrap_or(f64::NAN),
            )
        };
        let fixed = tally(&runs("testbed,jitter=50us"));
        let adaptive = tally(&runs("testbed,jitter=50us,adaptive"));
        let short = tally(&runs("testbed,jitter=50us,linger=20ms"));
        eprintln!(
            "(lossy, cut, median s): 300 ms {fixed:?}, adaptive {adaptive:?}, 20 ms {short:?}"
        );
        assert!(adaptive.0 >= 100, "the cells lose probes: {adaptive:?}");
        assert_eq!(adaptive.1, 0, "no straggler cut: {adaptive:?}");
        assert!(short.1 > 0, "a fixed 20 ms cuts some: {short:?}");
        assert!(adaptive.2 < fixed.2, "sooner: {adaptive:?} vs {fixed:?}");
    }

    /// With the agent's prompt reports (calib6) a search at 100 Mbit/s on/off 500 ms 50% can
    /// walk down inside one on phase, most of its streams meeting the saturated link, and end
    /// near 0 (seed 49: 9.0 Mbit/s, [0, 14.6], against 40.9; `calib::study::linger_seeds`).
    /// Such a search now goes to the time average (`Auto::alternates`). Seeds 1..=40 of the
    /// cell on the testbed-like model: the seeded case holds (it fails without the rule), and
    /// few runs are off by > 50% (200 seeds: 50 before the rule, 30 after, i.e. 15%; seeds
    /// 1..=40: 1). Bound: 25% of 40, the 200 seeds' share plus two binomial sd (0.056).
    #[test]
    fn a_search_that_walks_down_inside_an_on_phase_takes_the_time_average() {
        let host = |seed| super::study::host_from("testbed,jitter=50us,adaptive", seed);
        let run = |seed| {
            one_on(
                100e6,
                "onoff500",
                50,
                seed,
                AutoParams::default(),
                host(seed),
                true,
            )
        };
        let o = run(49).expect("an estimate");
        assert!(o.timeavg() && o.covered(), "{:?} truth {}", o.est, o.truth);
        let runs: Vec<Outcome> = (1..=40).filter_map(run).collect();
        let wild = runs.iter().filter(|o| o.err() > 0.5).count();
        eprintln!("> 50% off: {wild} of {}", runs.len());
        assert!(wild * 4 <= runs.len(), "{wild} of {}", runs.len());
    }

    /// On/off cross traffic at 50 ms periods and 50% load (A is 0 in the on phase, C in the
    /// off phase) on the testbed-like model, 20 and 100 Mbit/s, judged as the bench judges
    /// (onoff8). The search's streams sent after an on phase watched its backlog drain and
    /// gave no trend verdict, those sent in it rose: the search heard only the on phases, read
    /// A at 0.3–0.6 of the truth with a range below it, and half its runs did not go to the
    /// time average. Now a draining stream counts as below A (`SlopsParams::drained_below`)
    /// and fleets split evenly at rates far apart start the time average
    /// ([`crate::timeavg::split_fleets`]). 200 seeds per cell (`calib::study::dump`, FIX=calib7
    /// vs the default): held 206 → 332 of 400 (52% → 83%), > 50% off 102 → 47 (26% → 12%);
    /// per block of 40 seeds (80 runs) held 37–43 → 62–73. These 40 seeds measured held 43 →
    /// 73 of 80, > 50% off 20 → 4. Bounds for 80 runs at two binomial sd from the 200-seed
    /// shares: now held ≥ 59 (83% − 8 points) and > 50% off ≤ 15 (12% + 7 points); the calib7
    /// rule held ≤ 50 (52% + 11 points).
    #[test]
    fn onoff_at_50ms_and_half_load_is_heard_in_both_phases() {
        let runs = |p| testbed_like(&[(20e6, "onoff", 50), (100e6, "onoff", 50)], p);
        let tally = |r: &[Outcome]| {
            (
                r.iter().filter(|o| o.covered()).count(),
                r.iter().filter(|o| o.err() > 0.5).count(),
                r.len(),
            )
        };
        let now = tally(&runs(AutoParams::default()));
        let before = tally(&runs(super::study::fix_params("calib7")));
        eprintln!("held, > 50% off, runs: now {now:?}, calib7 {before:?}");
        assert_eq!(now.2, 80);
        assert!(now.0 >= 59 && now.1 <= 15, "now {now:?}");
        assert!(before.0 <= 50, "the calib7 rule {before:?}");
    }

    /// A receiver whose stamps stall now and then (the testbed-like model's 50 µs jitter) makes
    /// a few streams far below A read "rose"; the mean of A over the streams integrates them
    /// over the whole range below A and read 100 Mbit/s CBR low (r14 on the testbed: 4.7% /
    /// 14.8%). The gated median ([`crate::slops::MedianGate`]) reads the crossing instead.
    /// 100 Mbit/s CBR at 25 and 50% load, 40 seeds each: median / p90 error measured 0.0099 /
    /// 0.051 with it, 0.041 / 0.141 with the mean. The model is deterministic for a seed; the
    /// bounds lie between the two.
    #[test]
    fn the_median_is_not_pulled_down_by_false_rises_far_below_a() {
        let runs = |p| -> Vec<f64> {
            let cells = [(100e6, "cbr", 25), (100e6, "cbr", 50)];
            testbed_like(&cells, p).iter().map(|o| o.err()).collect()
        };
        let now = runs(AutoParams::default());
        let mean = runs(AutoParams {
            median: None,
            ..AutoParams::default()
        });
        let (n50, n90) = (q(now.clone(), 0.5), q(now.clone(), 0.9));
        let (m50, m90) = (q(mean.clone(), 0.5), q(mean.clone(), 0.9));
        eprintln!("error median / p90: gated median {n50:.4} / {n90:.4}, mean {m50:.4} / {m90:.4}");
        assert_eq!(now.len(), 80);
        assert!(n50 <= 0.02 && n90 <= 0.08, "gated median {n50} / {n90}");
        assert!(
            m50 > 0.02 && m90 > 0.08,
            "the test separates: mean {m50} / {m90}"
        );
    }

    /// Where A takes several values during a search (STEP levels 1 s apart, on/off at 75% load)
    /// the flat streams above the crossing are real, the median reads one phase and the mean the
    /// average the estimate promises: the gate (median only above the mean) keeps the mean
    /// there. 100 Mbit/s STEP at 50% and 20 Mbit/s on/off at 75%, 40 seeds each: median error
    /// and runs > 50% off measured 0.2005 and 5 gated, the same with the mean, 0.2049 and 9
    /// with the median wherever the search's value stands (100 seeds of every cell:
    /// docs/estimators.md, r15).
    #[test]
    fn where_a_takes_several_values_the_gate_keeps_the_mean() {
        let runs = |p| testbed_like(&[(100e6, "step", 50), (20e6, "onoff", 75)], p);
        let now = runs(AutoParams::default());
        let mean = runs(AutoParams {
            median: None,
            ..AutoParams::default()
        });
        // The median wherever the search's own value stands, read from the same runs.
        let ungated: Vec<f64> = mean
            .iter()
            .map(|o| signed_alt(o, |o| median_over_streams(&o.votes, o.c)).abs())
            .collect();
        let errs = |r: &[Outcome]| r.iter().map(|o| o.err()).collect::<Vec<f64>>();
        let wild = |e: &[f64]| e.iter().filter(|e| **e > 0.5).count();
        let (n, m) = (errs(&now), errs(&mean));
        eprintln!(
            "error median, > 50%: gated {:.4} {}, mean {:.4} {}, ungated median {:.4} {}",
            q(n.clone(), 0.5),
            wild(&n),
            q(m.clone(), 0.5),
            wild(&m),
            q(ungated.clone(), 0.5),
            wild(&ungated)
        );
        assert_eq!(now.len(), 80);
        assert!(
            wild(&n) <= wild(&m) && q(n.clone(), 0.5) <= q(m.clone(), 0.5) + 0.01,
            "gated {} {}, mean {} {}",
            wild(&n),
            q(n.clone(), 0.5),
            wild(&m),
            q(m.clone(), 0.5)
        );
        assert!(
            wild(&ungated) > wild(&n),
            "the test separates: ungated {}",
            wild(&ungated)
        );
    }

    /// Heavy Poisson cross traffic is steady at the stated second, and the time average must
    /// read it so (calib7): 20 Mbit/s Poisson at 75% on the testbed-like model (`HOST=testbed,
    /// adaptive,jitter=50us`, judged as the bench judges) goes to the time average in ~90% of
    /// runs, where a stream at a low rate behind the backlog of one at a high rate met a
    /// standing queue and counted as risen ([`crate::timeavg::TimeAvgParams::plateau_rises`]).
    /// 200 seeds (`calib::study::linger_effect`, FIXES=calib6,trap): > 50% off 54 → 14 (27% →
    /// 7%), median error 0.345 → 0.185. These 40 seeds measured 10 → 2 and 0.366 → 0.163; the
    /// bounds (now ≤ 5 and median ≤ 0.25, the old rule ≥ 6 and ≥ 0.28) lie between the two
    /// 200-seed shares with about 1.5 binomial sd of room each way, and fail if either moves.
    #[test]
    fn heavy_poisson_is_read_steady_by_the_time_average() {
        let host = |seed| host_from("testbed,adaptive,jitter=50us", seed);
        let runs = |p: AutoParams| -> (usize, f64, usize) {
            let runs: Vec<Outcome> = (1..=40)
                .filter_map(|seed| one_on(20e6, "poisson", 75, seed, p, host(seed), true))
                .collect();
            let wild = runs.iter().filter(|o| o.err() > 0.5).count();
            let timeavg = runs.iter().filter(|o| o.timeavg()).count();
            (
                wild,
                q(runs.iter().map(|o| o.err()).collect(), 0.5),
                timeavg,
            )
        };
        // Both arms with the fluid model's flat slack (¾, as when the bounds were measured);
        // the default's testbed ½ measured 2 and 0.158 here, under the same bounds.
        let fluid = AutoParams {
            timeavg_flat_slack: 0.75,
            ..AutoParams::default()
        };
        let (wild, median, timeavg) = runs(fluid);
        let (old_wild, old_median, _) = runs(AutoParams {
            timeavg_plateau: true,
            ..fluid
        });
        let (default_wild, default_median, _) = runs(AutoParams::default());
        eprintln!("now {wild} off, median {median:.3}; before {old_wild}, {old_median:.3}; time averages {timeavg}; default {default_wild}, {default_median:.3}");
        assert!(
            timeavg >= 30,
            "the cell no longer exercises the time average: {timeavg}"
        );
        assert!(wild <= 4 && median <= 0.2, "{wild} {median}");
        assert!(
            default_wild <= 4 && default_median <= 0.2,
            "{default_wild} {default_median}"
        );
        assert!(
            old_wild >= 6 && old_median >= 0.25,
            "{old_wild} {old_median}"
        );
    }

    /// Confidence means what it says: on seeds the table was not made from (201..=400), over
    /// every cell the model defines (22 cells, 4400 runs), the share of ranges that held the
    /// truth rises with the stated confidence and stays near it. Tolerance: a stated value is
    /// a share measured on ≥ 47 runs per band (binomial sd ≤ 0.07 at p = 0.5, ≤ 0.02 at p = 0.9
    /// with ≥ 350 runs); 0.12 is about two sd of the smallest bands; bands with fewer than 40
    /// runs are not judged.
    #[test]
    fn confidence_is_calibrated_on_fresh_seeds() {
        let mut runs = Vec::new();
        for c in [20e6, 100e6] {
            for kind in KINDS {
                for load in [25, 50, 75] {
                    for seed in 201..=400 {
                        runs.extend(one(c, kind, load, seed, AutoParams::default()));
                    }
                }
            }
        }
        let runs: Vec<Outcome> = runs.into_iter().filter(defined).collect();
        let (search, timeavg): (Vec<Outcome>, Vec<Outcome>) =
            runs.into_iter().partition(|o| !o.timeavg());
        // Pool the bands that state the same confidence; the time average states its own.
        let mut bands: Vec<(f64, usize, usize)> = tally(&search)
            .into_iter()
            .enumerate()
            .map(|(i, (n, k))| (confidence(EDGES[i]), n, k))
            .collect();
        let held = timeavg.iter().filter(|o| o.covered()).count();
        bands.push((TIMEAVG_HELD, timeavg.len(), held));
        bands.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut stated: Vec<(f64, usize, usize)> = Vec::new();
        for (p, n, k) in bands {
            match stated.last_mut() {
                Some(last) if last.0 == p => {
                    last.1 += n;
                    last.2 += k;
                }
                _ => stated.push((p, n, k)),
            }
        }
        let judged: Vec<(f64, f64)> = stated
            .iter()
            .filter(|(_, n, _)| *n >= 40)
            .map(|(p, n, k)| (*p, *k as f64 / *n as f64))
            .collect();
        eprintln!("stated, runs, held: {stated:?}");
        assert!(judged.len() >= 3, "{stated:?}");
        for (p, held) in &judged {
            assert!(
                (held - p).abs() <= 0.12,
                "stated {p} held {held}: {stated:?}"
            );
        }
        for w in judged.windows(2) {
            assert!(w[1].1 + 0.03 >= w[0].1, "not monotone: {stated:?}");
        }
    }

    /// Disagreeing evidence lowers the score: streams that contradict their fleets, a
    /// verification fleet that contradicted the bracket, chirps far from the final value.
    #[test]
    fn confidence_falls_when_the_evidence_disagrees() {
        let ev = Evidence {
            fleets: 6,
            voted: 20,
            dissent: 0,
            greys: 0,
            contradictions: 0,
            confirmed: 2,
            converged: true,
            queued: 0,
            saturated: 0,
            drained: 0,
            noise: 0.0,
        };
        let c = 20e6;
        let quiet = raw_score(&ev, Some(10.5e6), 10e6, c);
        // Half the streams against their fleets. (A quarter no longer lowers the stated value:
        // the table regenerated with the standing-queue evidence is flat above a raw score of
        // 0.5, where higher scores did not hold more ranges on the fluid model.)
        let dissent = raw_score(&Evidence { dissent: 10, ..ev }, Some(10.5e6), 10e6, c);
        let contradicted = raw_score(
            &Evidence {
                contradictions: 1,
                ..ev
            },
            Some(10.5e6),
            10e6,
            c,
        );
        let moved = raw_score(&ev, Some(17e6), 10e6, c);
        assert!(quiet > 0.9);
        for s in [dissent, contradicted] {
            assert!(
                s < quiet && confidence(s) < confidence(quiet),
                "{s} vs {quiet}"
            );
        }
        // Chirps 35% of C away lower the score, not (with this table) the stated value.
        assert!(moved < quiet && confidence(moved) <= confidence(quiet));
        assert_eq!(confidence(-1.0), 0.0);
        assert!(TABLE
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }

    /// The mean over the streams and its bounds: a clean search is its bracket; a fleet split
    /// half and half spreads the range over what it cannot tell apart.
    #[test]
    fn mean_and_bounds_from_votes() {
        let v = |rate: f64, inc, not, delta| Vote {
            rate,
            increasing: inc,
            not_increasing: not,
            delta,
        };
        let clean = [
            v(50.0, 0, 4, 25.0),
            v(75.0, 4, 0, 12.5),
            v(62.5, 4, 0, 3.0),
            v(56.0, 0, 3, 3.0),
        ];
        let (lo, mid, hi) = mean_over_streams(&clean, 100.0);
        assert_eq!((lo, hi), (56.0, 62.5));
        assert!((mid - 59.25).abs() < 1e-9);
        assert_eq!(delta_bounds(&clean, 100.0), (53.0, 65.5));
        // One fleet that says "below" at 70 after one said "above" at 62.5: pooled, and the
        // bounds span both.
        let split = [v(50.0, 0, 4, 25.0), v(62.5, 4, 0, 3.0), v(70.0, 0, 4, 3.0)];
        let (lo, _, hi) = mean_over_streams(&split, 100.0);
        assert_eq!((lo, hi), (60.0, 81.25));
        assert_eq!(delta_bounds(&split, 100.0), (59.5, 73.0));
        // No votes: the whole range.
        assert_eq!(mean_over_streams(&[], 100.0), (0.0, 50.0, 100.0));
    }

    /// The median over the streams: where the share of flat streams crosses ½, the middle of a
    /// stretch at exactly ½; one false rise far below A pulls the mean down by a share of the
    /// whole range below it, the median only by what it moves the crossing.
    #[test]
    fn median_from_votes() {
        let v = |rate: f64, inc, not| Vote {
            rate,
            increasing: inc,
            not_increasing: not,
            delta: 3.0,
        };
        let step = [v(10.0, 0, 4), v(20.0, 4, 0)];
        assert!((median_over_streams(&step, 100.0) - 15.0).abs() < 1e-9);
        let plateau = [v(10.0, 0, 4), v(20.0, 2, 2), v(30.0, 2, 2), v(40.0, 4, 0)];
        assert!((median_over_streams(&plateau, 100.0) - 25.0).abs() < 1e-9);
        // A at about 55: one stream of four rose at 10. Pooled with the flat fleet at 50 (the
        // share may not rise with the rate), 0.875 up to 50, then 0 at 60.
        let false_rise = [v(10.0, 1, 3), v(50.0, 0, 4), v(60.0, 4, 0)];
        let (_, mean, _) = mean_over_streams(&false_rise, 100.0);
        let median = median_over_streams(&false_rise, 100.0);
        assert!((mean - 48.75).abs() < 1e-9, "{mean}");
        assert!(
            (median - (50.0 + 10.0 * 0.375 / 0.875)).abs() < 1e-9,
            "{median}"
        );
        // Both anchors only: the middle of the range.
        assert!((median_over_streams(&[], 100.0) - 50.0).abs() < 1e-9);
        let pts = share_below(&false_rise, 100.0);
        assert!(share_band(&pts) > 0.0);
    }

    /// The time scale is stated and honoured: with on/off cross traffic at 50 ms periods (A
    /// alternates between C − 2X and C at 25% load, 0 and C at 50%), every estimate states a
    /// time scale of at least the 100 ms the fleets are spread over, and its value is the
    /// average over that scale, not a phase: over 200 seeds per cell, the median error against
    /// the truth at the stated scale is measured 0.06 and 0.01 (25%, 20 and 100 Mbit/s) and
    /// 0.23 and 0.12 (50%), against 0.17/0.01/0.28/0.25 for the bracket's middle with fleets
    /// back to back, whose p90 reached 0.89–0.95 at 50% (now 0.37–0.46). Asserted: every
    /// median ≤ 0.25, the p90 over the four cells below the bracket's.
    #[test]
    fn onoff_at_50ms_reads_the_average_at_the_stated_time_scale() {
        let q = |mut v: Vec<f64>, p: f64| {
            v.sort_by(f64::total_cmp);
            crate::stats::quantile(&v, p).unwrap()
        };
        let (mut all_now, mut all_before) = (Vec::new(), Vec::new());
        for c in [20e6, 100e6] {
            for load in [25, 50] {
                let runs = |p: AutoParams| -> Vec<Outcome> {
                    (1..=200)
                        .filter_map(|s| one(c, "onoff", load, s, p))
                        .collect()
                };
                let now = runs(AutoParams::default());
                let before = runs(AutoParams {
                    calibrated: false,
                    timescale_ns: 0,
                    ..AutoParams::default()
                });
                assert!(now
                    .iter()
                    .all(|o| o.est.quality.timescale_ms.is_some_and(|t| t >= 100.0)));
                let med = q(now.iter().map(Outcome::err).collect(), 0.5);
                let e = |v: &[Outcome], p| q(v.iter().map(Outcome::err).collect(), p);
                eprintln!(
                    "{c} {load}%: median {med:.3} p90 {:.3}, before {:.3} / {:.3}",
                    e(&now, 0.9),
                    e(&before, 0.5),
                    e(&before, 0.9)
                );
                assert!(med <= 0.25, "{c} {load}%: median {med}");
                all_now.extend(now.iter().map(Outcome::err));
                all_before.extend(before.iter().map(Outcome::err));
            }
        }
        let (p90, p90_before) = (q(all_now, 0.9), q(all_before, 0.9));
        assert!(p90 < p90_before, "p90 {p90} before {p90_before}");
    }
}

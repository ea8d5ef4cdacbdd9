//! Packet loss models for the delay line. Pure: a model decides, packet by packet, whether a
//! packet is lost; the line does the I/O.
//!
//! Text form (`--loss`):
//! - `1%`, `0.01`, `random:1%` — independent (Bernoulli) loss with that probability;
//! - `ge:p=0.5%,r=20%[,bad=100%,good=0%]` — Gilbert–Elliott: a two-state Markov chain stepped
//!   once per packet, with p = P(good→bad), r = P(bad→good), and loss probability `good` (1−k)
//!   in the good state and `bad` (1−h) in the bad state. With the defaults (good 0, bad 100%)
//!   it is the Gilbert model: losses come in bursts of mean length 1/r.
//!
//! A probability is a percentage (`1%`) or a fraction (`0.01`); a bare number above 1 is refused
//! rather than guessed to be a percentage.

use crate::Error;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Largest long-run loss rate a model may have: beyond it the path barely carries anything and
/// no measurement on it means much.
pub const MAX_LOSS_RATE: f64 = 0.5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LossModel {
    /// Each packet is lost independently with probability `p`.
    Random { p: f64 },
    /// Two-state Markov chain stepped per packet (see the module docs).
    GilbertElliott {
        p_gb: f64,
        p_bg: f64,
        loss_good: f64,
        loss_bad: f64,
    },
}

impl LossModel {
    /// Parse the text form; errors name the entry at fault.
    pub fn parse(s: &str) -> Result<LossModel, Error> {
        let bad = |why: String| {
            Error::BadInput(format!(
                "bad loss {s:?}: {why} (use e.g. 1%, random:1% or ge:p=0.5%,r=20%[,bad=100%,good=0%])"
            ))
        };
        let t = s.trim();
        let (kind, rest) = match t.split_once(':') {
            Some((k, r)) => (k.trim().to_ascii_lowercase(), r),
            None => ("random".to_string(), t),
        };
        let model = match kind.as_str() {
            "random" | "bernoulli" => LossModel::Random {
                p: prob("probability", rest).map_err(bad)?,
            },
            "ge" | "gilbert" | "gilbert-elliott" => {
                let (mut p, mut r, mut good, mut bad_loss) = (None, None, 0.0, 1.0);
                for tok in rest.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                    let (k, v) = tok
                        .split_once('=')
                        .ok_or_else(|| bad(format!("{tok:?} is not KEY=VALUE")))?;
                    let k = k.trim().to_ascii_lowercase();
                    let v = prob(&k, v).map_err(bad)?;
                    match k.as_str() {
                        "p" => p = Some(v),
                        "r" => r = Some(v),
                        "good" => good = v,
                        "bad" => bad_loss = v,
                        _ => {
                            return Err(bad(format!("unknown key {k:?}; ge takes p, r, good, bad")))
                        }
                    }
                }
                LossModel::GilbertElliott {
                    p_gb: p.ok_or_else(|| bad("ge needs p= (good→bad)".into()))?,
                    p_bg: r.ok_or_else(|| bad("ge needs r= (bad→good)".into()))?,
                    loss_good: good,
                    loss_bad: bad_loss,
                }
            }
            other => return Err(bad(format!("unknown kind {other:?}"))),
        };
        model.validate().map_err(|e| match e {
            Error::BadInput(m) => Error::BadInput(format!("bad loss {s:?}: {m}")),
            e => e,
        })?;
        Ok(model)
    }

    /// Refuse probabilities outside [0, 1], chains that never leave the bad state, and models
    /// that lose more than [`MAX_LOSS_RATE`] in the long run.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::BadInput(m));
        let entries: Vec<(&str, f64)> = match *self {
            LossModel::Random { p } => vec![("p", p)],
            LossModel::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => vec![
                ("p (good→bad)", p_gb),
                ("r (bad→good)", p_bg),
                ("good (loss in the good state)", loss_good),
                ("bad (loss in the bad state)", loss_bad),
            ],
        };
        for (name, v) in entries {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} = {v} is not a probability in [0, 1]"));
            }
        }
        if let LossModel::GilbertElliott { p_gb, p_bg, .. } = *self {
            if p_gb > 0.0 && p_bg == 0.0 {
                return bad("r (bad→good) = 0: once bad, the chain would never recover".into());
            }
        }
        let rate = self.expected_rate();
        if rate > MAX_LOSS_RATE {
            return bad(format!(
                "long-run loss rate {:.1}% is absurd for a measurement path (at most {:.0}%)",
                rate * 100.0,
                MAX_LOSS_RATE * 100.0
            ));
        }
        Ok(())
    }

    /// The long-run fraction of packets lost. Gilbert–Elliott: π_bad = p/(p+r), rate =
    /// π_good·(1−k) + π_bad·(1−h); a chain with p = r = 0 stays in its first (good) state.
    pub fn expected_rate(&self) -> f64 {
        match *self {
            LossModel::Random { p } => p,
            LossModel::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let pi_bad = if p_gb + p_bg > 0.0 {
                    p_gb / (p_gb + p_bg)
                } else {
                    0.0
                };
                (1.0 - pi_bad) * loss_good + pi_bad * loss_bad
            }
        }
    }
}

/// `1%`, `0.5%` or `0.01` as a probability; `what` names the entry in the error.
fn prob(what: &str, v: &str) -> Result<f64, String> {
    let v = v.trim();
    let (num, scale) = match v.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (v, 1.0),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{what} = {v:?} is not a number or percentage"))?;
    if !x.is_finite() || x < 0.0 {
        return Err(format!("{what} = {v:?} must be a probability in [0, 1]"));
    }
    if scale == 1.0 && x > 1.0 {
        return Err(format!(
            "{what} = {v:?} is above 1; write {v}% for a percentage"
        ));
    }
    let p = x / scale;
    if p > 1.0 {
        return Err(format!("{what} = {v:?} is above 100%"));
    }
    Ok(p)
}

impl fmt::Display for LossModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A short percentage when it reads back as the same number, else the exact fraction.
        let pct = |x: f64| {
            let s = format!("{:.6}", x * 100.0);
            let s = s.trim_end_matches('0').trim_end_matches('.');
            match s.parse::<f64>() {
                Ok(v) if v / 100.0 == x => format!("{s}%"),
                _ => format!("{x}"),
            }
        };
        match *self {
            LossModel::Random { p } => write!(f, "random:{}", pct(p)),
            LossModel::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => write!(
                f,
                "ge:p={},r={},bad={},good={}",
                pct(p_gb),
                pct(p_bg),
                pct(loss_bad),
                pct(loss_good)
            ),
        }
    }
}

impl std::str::FromStr for LossModel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        LossModel::parse(s)
    }
}

/// A model running over a packet sequence: its RNG and, for Gilbert–Elliott, the chain's state.
/// The chain starts in the good state. Same model and seed, same losses.
#[derive(Debug)]
pub struct LossProcess {
    model: LossModel,
    rng: StdRng,
    bad: bool,
}

impl LossProcess {
    pub fn new(model: LossModel, seed: u64) -> LossProcess {
        LossProcess {
            model,
            rng: StdRng::seed_from_u64(seed),
            bad: false,
        }
    }

    pub fn model(&self) -> &LossModel {
        &self.model
    }

    /// Whether the next packet is lost. Gilbert–Elliott: the loss is drawn in the current
    /// state, then the chain steps, so a bad-state stay lasts a geometric number of packets of
    /// mean 1/r.
    pub fn lose(&mut self) -> bool {
        match self.model {
            LossModel::Random { p } => self.rng.random::<f64>() < p,
            LossModel::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let loss = if self.bad { loss_bad } else { loss_good };
                let lost = self.rng.random::<f64>() < loss;
                let flip = if self.bad { p_bg } else { p_gb };
                if self.rng.random::<f64>() < flip {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ge(p: f64, r: f64, good: f64, bad: f64) -> LossModel {
        LossModel::GilbertElliott {
            p_gb: p,
            p_bg: r,
            loss_good: good,
            loss_bad: bad,
        }
    }

    #[test]
    fn parses_the_text_forms() {
        assert_eq!(
            LossModel::parse("1%").unwrap(),
            LossModel::Random { p: 0.01 }
        );
        assert_eq!(
            LossModel::parse("random:0.02").unwrap(),
            LossModel::Random { p: 0.02 }
        );
        assert_eq!(
            LossModel::parse("ge:p=0.5%,r=20%").unwrap(),
            ge(0.005, 0.2, 0.0, 1.0)
        );
        assert_eq!(
            LossModel::parse("GE: p=1%, r=0.3, bad=80%, good=0.1%").unwrap(),
            ge(0.01, 0.3, 0.001, 0.8)
        );
        // Display gives back the same model.
        for m in [
            LossModel::Random { p: 0.0125 },
            LossModel::Random { p: 1.0 / 3.0 },
            ge(0.005, 0.2, 0.0, 1.0),
        ] {
            assert_eq!(LossModel::parse(&m.to_string()).unwrap(), m);
        }
        assert_eq!(LossModel::Random { p: 0.01 }.to_string(), "random:1%");
        // And JSON.
        let m = ge(0.01, 0.25, 0.0, 1.0);
        let j = serde_json::to_string(&m).unwrap();
        assert!(j.contains("\"kind\":\"gilbert_elliott\""), "{j}");
        assert_eq!(serde_json::from_str::<LossModel>(&j).unwrap(), m);
    }

    #[test]
    fn refuses_nonsense_naming_the_entry() {
        for (s, why) in [
            ("5", "above 1; write 5%"),
            ("150%", "above 100%"),
            ("-1%", "must be a probability"),
            ("lots", "not a number"),
            ("nan", "must be a probability"),
            ("zap:1%", "unknown kind"),
            ("ge:r=20%", "needs p="),
            ("ge:p=1%", "needs r="),
            ("ge:p=1%,r=20%,q=3%", "unknown key \"q\""),
            ("ge:p=1%,r=20%,bad", "not KEY=VALUE"),
            ("ge:p=1%,r=0", "never recover"),
            ("ge:p=1%,r=20%,bad=2", "bad = \"2\" is above 1"),
            ("60%", "absurd"),
            ("ge:p=50%,r=10%", "absurd"),
        ] {
            let e = LossModel::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
        let e = LossModel::Random { p: 1.5 }.validate().unwrap_err();
        assert!(e.to_string().contains("p = 1.5"), "{e}");
        let e = ge(0.1, f64::NAN, 0.0, 1.0).validate().unwrap_err();
        assert!(e.to_string().contains("r (bad→good)"), "{e}");
    }

    #[test]
    fn expected_rates() {
        assert_eq!(LossModel::Random { p: 0.03 }.expected_rate(), 0.03);
        // π_bad = 0.01 / 0.26.
        let r = ge(0.01, 0.25, 0.0, 1.0).expected_rate();
        assert!((r - 0.01 / 0.26).abs() < 1e-12, "{r}");
        let r = ge(0.02, 0.2, 0.01, 0.5).expected_rate();
        let pb = 0.02 / 0.22;
        assert!((r - ((1.0 - pb) * 0.01 + pb * 0.5)).abs() < 1e-12, "{r}");
        assert_eq!(ge(0.0, 0.0, 0.0, 1.0).expected_rate(), 0.0);
    }

    /// Losses of `n` packets as a vector of flags.
    fn run(model: LossModel, seed: u64, n: usize) -> Vec<bool> {
        let mut lp = LossProcess::new(model, seed);
        (0..n).map(|_| lp.lose()).collect()
    }

    #[test]
    fn random_rate_matches() {
        let n = 1_000_000;
        for seed in 1..=3 {
            let lost = run(LossModel::Random { p: 0.01 }, seed, n);
            let rate = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
            // Binomial sd = sqrt(p(1-p)/n) ≈ 0.0001: allow 5 sd.
            assert!((rate - 0.01).abs() < 5e-4, "seed {seed}: {rate}");
        }
        // Same seed, same losses; another seed, others.
        let m = LossModel::Random { p: 0.1 };
        assert_eq!(run(m.clone(), 7, 1000), run(m.clone(), 7, 1000));
        assert_ne!(run(m.clone(), 7, 1000), run(m, 8, 1000));
    }

    /// Lengths of the runs of consecutive losses.
    fn bursts(lost: &[bool]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut run = 0;
        for &l in lost {
            if l {
                run += 1;
            } else if run > 0 {
                out.push(run);
                run = 0;
            }
        }
        out
    }

    #[test]
    fn gilbert_rate_and_burst_length() {
        let n = 1_000_000;
        let (p, r) = (0.01, 0.25);
        let m = ge(p, r, 0.0, 1.0);
        for seed in 1..=3 {
            let lost = run(m.clone(), seed, n);
            let rate = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
            // ~9600 bursts of mean 4 and variance (1-r)/r² = 12: the lost count has variance
            // ≈ B·(12 + 16) ≈ 2.7e5, sd ≈ 520 packets = 0.052% of n; allow 5 sd.
            assert!(
                (rate - m.expected_rate()).abs() < 0.0026,
                "seed {seed}: {rate}"
            );
            let b = bursts(&lost);
            let mean = b.iter().sum::<usize>() as f64 / b.len() as f64;
            // Bursts are geometric with mean 1/r = 4, sd 3.5: the mean of ~9600 has sd 0.035.
            assert!(
                (mean - 1.0 / r).abs() < 0.18,
                "seed {seed}: mean burst {mean}"
            );
        }
        // A lossy good state and a leaky bad state still average to the expected rate.
        let m = ge(0.05, 0.3, 0.01, 0.6);
        let lost = run(m.clone(), 4, n);
        let rate = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
        assert!((rate - m.expected_rate()).abs() < 0.003, "{rate}");
    }
}

//! A subscription's conditions, sans-IO: fed each new estimate of its path and metric, it says
//! which events (if any) the subscriber gets. "Tell me when available bandwidth falls below X or
//! rises by more than Y%."

use mgrp_store::Record;
use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Conditions {
    /// `below` when the value falls under this, `above` when it comes back.
    pub below: Option<f64>,
    /// `rise` when the value exceeds the reference by more than this many percent.
    pub rise_pct: Option<f64>,
    /// `fall` when the value is under the reference by more than this many percent.
    pub fall_pct: Option<f64>,
    /// `exceeds` when the value goes over this (jitter exceeds Y), `within` when it comes back.
    pub exceeds: Option<f64>,
}

impl Conditions {
    pub fn is_empty(&self) -> bool {
        self.below.is_none()
            && self.rise_pct.is_none()
            && self.fall_pct.is_none()
            && self.exceeds.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Any new estimate (a subscription without conditions).
    Estimate,
    Below,
    Above,
    Rise,
    Fall,
    Exceeds,
    Within,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Estimate => "estimate",
            Kind::Below => "below",
            Kind::Above => "above",
            Kind::Rise => "rise",
            Kind::Fall => "fall",
            Kind::Exceeds => "exceeds",
            Kind::Within => "within",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub kind: Kind,
    pub path: String,
    pub metric: String,
    pub value: f64,
    pub threshold: Option<f64>,
    pub reference: Option<f64>,
    pub change_pct: Option<f64>,
    pub record: Record,
}

/// One subscriber's state: which side of the threshold the value was on, and the reference a
/// rise or fall is measured from (the first estimate, then each rise/fall event's value).
#[derive(Debug, Clone)]
pub struct Watch {
    cond: Conditions,
    was_below: Option<bool>,
    was_over: Option<bool>,
    reference: Option<f64>,
}

impl Watch {
    pub fn new(cond: Conditions) -> Watch {
        Watch {
            cond,
            was_below: None,
            was_over: None,
            reference: None,
        }
    }

    /// The events that estimate `r` raises, in order.
    pub fn on_record(&mut self, r: &Record) -> Vec<Event> {
        let v = r.value;
        let ev = |kind, threshold, reference, change_pct| Event {
            kind,
            path: r.path.clone(),
            metric: r.metric.clone(),
            value: v,
            threshold,
            reference,
            change_pct,
            record: r.clone(),
        };
        if self.cond.is_empty() {
            return vec![ev(Kind::Estimate, None, None, None)];
        }
        let mut out = Vec::new();
        if let Some(x) = self.cond.below {
            let below = v < x;
            match (self.was_below, below) {
                // The first estimate says where things stand only if they are already bad.
                (None, true) | (Some(false), true) => {
                    out.push(ev(Kind::Below, Some(x), None, None))
                }
                (Some(true), false) => out.push(ev(Kind::Above, Some(x), None, None)),
                _ => {}
            }
            self.was_below = Some(below);
        }
        if let Some(x) = self.cond.exceeds {
            let over = v > x;
            match (self.was_over, over) {
                (None, true) | (Some(false), true) => {
                    out.push(ev(Kind::Exceeds, Some(x), None, None))
                }
                (Some(true), false) => out.push(ev(Kind::Within, Some(x), None, None)),
                _ => {}
            }
            self.was_over = Some(over);
        }
        if self.cond.rise_pct.is_some() || self.cond.fall_pct.is_some() {
            match self.reference {
                None => self.reference = Some(v),
                Some(r0) => {
                    // Relative to the reference; a zero reference makes any rise infinite.
                    let pct = if r0 > 0.0 {
                        (v - r0) / r0 * 100.0
                    } else if v > 0.0 {
                        f64::INFINITY
                    } else {
                        0.0
                    };
                    let kind = match (self.cond.rise_pct, self.cond.fall_pct) {
                        (Some(y), _) if pct > y => Some(Kind::Rise),
                        (_, Some(y)) if -pct > y => Some(Kind::Fall),
                        _ => None,
                    };
                    if let Some(k) = kind {
                        out.push(ev(k, None, Some(r0), pct.is_finite().then_some(pct)));
                        self.reference = Some(v);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: f64) -> Record {
        Record {
            path: "a->b".into(),
            metric: "avail_bw".into(),
            t_ns: 1,
            value: v,
            low: v,
            high: v,
            method: "auto".into(),
            source: "active".into(),
            probe_bytes: 0,
            trains: 1,
            confidence: 1.0,
            elapsed_s: 0.1,
            final_: true,
            timescale_ms: None,
        }
    }

    fn kinds(w: &mut Watch, vals: &[f64]) -> Vec<(usize, Kind)> {
        vals.iter()
            .enumerate()
            .flat_map(|(i, v)| w.on_record(&rec(*v)).into_iter().map(move |e| (i, e.kind)))
            .collect()
    }

    #[test]
    fn no_conditions_passes_every_estimate() {
        let mut w = Watch::new(Conditions::default());
        assert_eq!(kinds(&mut w, &[1.0, 1.0]).len(), 2);
    }

    #[test]
    fn below_is_edge_triggered_and_reports_a_bad_start() {
        let c = Conditions {
            below: Some(10.0),
            ..Default::default()
        };
        let mut w = Watch::new(c);
        assert_eq!(
            kinds(&mut w, &[12.0, 11.0, 9.0, 8.0, 10.0, 12.0, 3.0]),
            vec![(2, Kind::Below), (4, Kind::Above), (6, Kind::Below)]
        );
        let mut w = Watch::new(c);
        assert_eq!(kinds(&mut w, &[5.0, 6.0]), vec![(0, Kind::Below)]);
    }

    #[test]
    fn exceeds_is_edge_triggered_and_reports_a_bad_start() {
        let c = Conditions {
            exceeds: Some(0.005),
            ..Default::default()
        };
        let mut w = Watch::new(c);
        assert_eq!(
            kinds(&mut w, &[0.001, 0.006, 0.007, 0.005, 0.009]),
            vec![(1, Kind::Exceeds), (3, Kind::Within), (4, Kind::Exceeds)]
        );
        let mut w = Watch::new(c);
        assert_eq!(kinds(&mut w, &[0.01, 0.02]), vec![(0, Kind::Exceeds)]);
    }

    #[test]
    fn rise_and_fall_move_the_reference() {
        let mut w = Watch::new(Conditions {
            rise_pct: Some(20.0),
            fall_pct: Some(20.0),
            ..Default::default()
        });
        // 100 → 115 (+15%, nothing) → 125 (+25%: rise, ref 125) → 105 (−16%) → 95 (−24%: fall).
        let got = kinds(&mut w, &[100.0, 115.0, 125.0, 105.0, 95.0]);
        assert_eq!(got, vec![(2, Kind::Rise), (4, Kind::Fall)]);
        let mut w = Watch::new(Conditions {
            fall_pct: Some(50.0),
            ..Default::default()
        });
        let e = w.on_record(&rec(10.0));
        assert!(e.is_empty());
        let e = w.on_record(&rec(4.0));
        assert_eq!(e[0].reference, Some(10.0));
        assert!((e[0].change_pct.unwrap() + 60.0).abs() < 1e-9);
        // Only falls were asked for.
        assert!(w.on_record(&rec(400.0)).is_empty());
    }

    #[test]
    fn a_zero_reference_does_not_divide_by_zero() {
        let mut w = Watch::new(Conditions {
            rise_pct: Some(10.0),
            ..Default::default()
        });
        w.on_record(&rec(0.0));
        let e = w.on_record(&rec(1.0));
        assert_eq!(e[0].kind, Kind::Rise);
        assert_eq!(e[0].change_pct, None);
    }
}

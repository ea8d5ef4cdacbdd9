//! The store's test suite, written once and run against every backend: SQLite here (unit
//! tests), PostgreSQL in `mgrp-store-pg`'s tests. Each case takes a [`Make`] that opens an
//! empty store with a given retention, and panics with what differed.
//!
//! Answers are checked against a brute-force aggregation of the rows given, so a backend is
//! right by construction, not by agreeing with another backend.

use crate::{Error, EstimateStore, Point, Record, ScaleAnswer};
use std::time::Duration;

/// Opens an empty store with this raw retention.
pub type Make<'a> = &'a mut dyn FnMut(Duration) -> Box<dyn EstimateStore>;

/// One `#[test]` per case, each opening its stores with `$make` (an expression of type
/// `impl FnMut(Duration) -> Box<dyn EstimateStore>`, evaluated once per test).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            time_scale_answers_match_brute_force,
            random_series_match_brute_force,
            retention_keeps_aggregates,
            retention_horizon_is_exact,
            ties_keep_insertion_order,
            bad_input_is_refused_whole,
            unknown_series_are_empty,
            round_trips_every_field,
            maps_keep_the_newest_per_coordinator,
            queries_are_kept_replaced_and_deleted,
        );
    };
    (@each $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let mut make = $make;
                $crate::conformance::$case(&mut make);
            }
        )*
    };
}

/// A record with the quality fields fixed.
pub fn rec(path: &str, metric: &str, t_ns: u64, value: f64) -> Record {
    Record {
        path: path.into(),
        metric: metric.into(),
        t_ns,
        value,
        low: value * 0.9,
        high: value * 1.1,
        method: "auto".into(),
        source: "active".into(),
        probe_bytes: 1000,
        trains: 3,
        confidence: 1.0,
        elapsed_s: 0.5,
        final_: true,
        timescale_ms: None,
    }
}

/// A small deterministic generator (splitmix64): the suite needs no `rand`.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..hi`.
    pub fn range_f64(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }
}

/// Brute force over the raw rows of one series: the steps of `step_ns` in `[from, to)`,
/// rows with equal times taken in the order given (as stored).
pub fn brute(rows: &[Record], step_ns: u64, from: u64, to: u64) -> Vec<Point> {
    let mut sorted: Vec<&Record> = rows
        .iter()
        .filter(|r| r.t_ns >= from && r.t_ns < to)
        .collect();
    // Stable: ties keep their insertion order.
    sorted.sort_by_key(|r| r.t_ns);
    let mut out: Vec<Point> = Vec::new();
    for r in sorted {
        let s = r.t_ns / step_ns * step_ns;
        match out.last_mut() {
            Some(p) if p.start_ns == s => {
                p.n += 1;
                p.mean += r.value; // the sum, divided below
                p.min = p.min.min(r.value);
                p.max = p.max.max(r.value);
                p.last = r.value;
            }
            _ => out.push(Point {
                start_ns: s,
                n: 1,
                mean: r.value,
                min: r.value,
                max: r.value,
                last: r.value,
            }),
        }
    }
    for p in &mut out {
        p.mean /= p.n as f64;
    }
    out
}

/// Equal points (means to a relative 1e-9: backends sum in different orders).
pub fn close(a: &[Point], b: &[Point]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.start_ns == y.start_ns
                && x.n == y.n
                && (x.mean - y.mean).abs() <= 1e-9 * y.mean.abs().max(1.0)
                && x.min == y.min
                && x.max == y.max
                && x.last == y.last
        })
}

/// `count` steps of `step` ending at `end`, as the store must answer from `rows` (one series,
/// in insertion order), with the source it must name.
fn expect(rows: &[Record], step_s: u64, count: u64, end: u64) -> (Vec<Point>, String) {
    let step_ns = step_s * 1_000_000_000;
    let last = end.saturating_sub(1) / step_ns;
    let from = (last + 1).saturating_sub(count) * step_ns;
    let source = match crate::SCALES.iter().rev().find(|s| step_s % *s == 0) {
        Some(s) => format!("agg_{s}s"),
        None => "raw".into(),
    };
    (brute(rows, step_ns, from, (last + 1) * step_ns), source)
}

fn insert_in_batches(s: &mut dyn EstimateStore, rows: &[Record], rng: &mut Rng) {
    let mut i = 0;
    while i < rows.len() {
        let j = (i + 1 + rng.below(400) as usize).min(rows.len());
        s.insert(&rows[i..j]).unwrap();
        i = j;
    }
}

fn assert_scale(got: &ScaleAnswer, want: &(Vec<Point>, String), what: &str) {
    assert_eq!(got.source, want.1, "{what}");
    assert!(got.complete, "{what}");
    assert!(
        close(&got.points, &want.0),
        "{what}: {} vs {} points, first {:?} vs {:?}",
        got.points.len(),
        want.0.len(),
        got.points.first(),
        want.0.first()
    );
}

/// Time-scale answers, from aggregates and from raw rows, match a brute-force aggregation of
/// the same estimates, for steps on and off the materialised scales.
pub fn time_scale_answers_match_brute_force(make: Make<'_>) {
    let mut s = make(Duration::from_secs(86_400 * 365));
    let mut rng = Rng::new(7);
    let t0 = 1_795_000_000_000_000_000u64;
    let mut rows = Vec::new();
    for i in 0..3000u64 {
        // Irregular times over ~3 hours, distinct (so "last" is well defined).
        let t = t0 + i * 3_600_000_000 + rng.below(3_000_000_000);
        rows.push(rec("a->b", "avail_bw", t, rng.range_f64(1e6, 1e8)));
        if i % 3 == 0 {
            rows.push(rec("a->c", "avail_bw", t, 5e6));
        }
    }
    s.insert(&rows).unwrap();
    let a_b: Vec<Record> = rows.iter().filter(|r| r.path == "a->b").cloned().collect();
    let end = t0 + 3 * 3_600_000_000_000;
    for (step, count) in [
        (1u64, 500u64),
        (60, 60),
        (120, 30),
        (3600, 3),
        (7, 200),
        (90, 100),
    ] {
        let got = s
            .scale(
                "a->b",
                "avail_bw",
                Duration::from_secs(step),
                count as usize,
                end,
            )
            .unwrap();
        let want = expect(&a_b, step, count, end);
        assert!(!want.0.is_empty());
        assert_scale(&got, &want, &format!("step {step} x{count}"));
    }
    assert_eq!(s.count().unwrap(), rows.len() as u64);
    assert_eq!(s.latest("a->c", "avail_bw").unwrap().unwrap().value, 5e6);
    assert_eq!(
        s.series().unwrap(),
        vec![
            ("a->b".to_string(), "avail_bw".to_string()),
            ("a->c".to_string(), "avail_bw".to_string())
        ]
    );
}

/// Random estimates over several series, inserted in random batches and out of order, some
/// sharing a time: every step, count and end (before, inside, on an hour, long after), every
/// range and limit, answer as the brute force does.
pub fn random_series_match_brute_force(make: Make<'_>) {
    const PATHS: [&str; 3] = ["10.0.0.1->10.0.0.2", "10.0.0.1->10.0.0.3", "a->b"];
    const METRICS: [&str; 2] = ["avail_bw", "rtt"];
    const H: u64 = 3_600_000_000_000;
    let t0 = 1_795_000_000_123_456_789u64;
    let hours = 4;
    let mut s = make(Duration::from_secs(86_400 * 365));
    let mut rng = Rng::new(20_260_521);
    let mut rows: Vec<Record> = Vec::new();
    for _ in 0..4000 {
        let (p, m) = (PATHS[rng.below(3) as usize], METRICS[rng.below(2) as usize]);
        let tie = rows
            .iter()
            .rev()
            .take(50)
            .find(|r| r.path == p && r.metric == m)
            .map(|r| r.t_ns);
        let t = match tie {
            Some(t) if rng.below(20) == 0 => t,
            _ => t0 + rng.below(hours * H),
        };
        rows.push(rec(p, m, t, rng.range_f64(1e3, 1e8)));
    }
    insert_in_batches(&mut *s, &rows, &mut rng);
    assert_eq!(s.count().unwrap(), rows.len() as u64);
    let mut non_empty = 0;
    for p in PATHS {
        for m in METRICS {
            let series: Vec<Record> = rows
                .iter()
                .filter(|r| r.path == p && r.metric == m)
                .cloned()
                .collect();
            for step in [1u64, 7, 60, 120, 3600, 7200] {
                for end in [
                    t0 + rng.below(hours * H),
                    t0 + hours * H,
                    (t0 / H + 3) * H,
                    t0 - 1,
                    t0 + 100 * hours * H,
                ] {
                    for count in [1u64, 10, 333, 5000] {
                        let got = s
                            .scale(p, m, Duration::from_secs(step), count as usize, end)
                            .unwrap();
                        let want = expect(&series, step, count, end);
                        non_empty += !want.0.is_empty() as usize;
                        assert_scale(&got, &want, &format!("{p} {m} {step}s x{count} to {end}"));
                    }
                }
            }
            let mut sorted = series.clone();
            sorted.sort_by_key(|r| r.t_ns);
            for _ in 0..20 {
                let from = t0 + rng.below(hours * H);
                let to = from + rng.below(H);
                let limit = [0usize, 1, 17, 100_000][rng.below(4) as usize];
                let want: Vec<Record> = sorted
                    .iter()
                    .filter(|r| r.t_ns >= from && r.t_ns < to)
                    .take(limit)
                    .cloned()
                    .collect();
                assert_eq!(
                    s.range(p, m, from, to, limit).unwrap(),
                    want,
                    "range {p} {m} {from}..{to} limit {limit}"
                );
            }
            assert_eq!(s.range(p, m, 0, u64::MAX, usize::MAX).unwrap(), sorted);
            // The newest: the first stored of those at the newest time.
            let newest = sorted.iter().map(|r| r.t_ns).max().unwrap();
            let first = sorted.iter().find(|r| r.t_ns == newest).cloned();
            assert_eq!(s.latest(p, m).unwrap(), first, "latest {p} {m}");
        }
    }
    assert!(
        non_empty > 300,
        "too few non-empty answers to mean much: {non_empty}"
    );
}

/// Raw rows go after the retention; aggregates stay and still answer; a step that needs raw
/// rows says it is incomplete.
pub fn retention_keeps_aggregates(make: Make<'_>) {
    let mut s = make(Duration::from_secs(600));
    // On a minute boundary, so 100 one-minute steps hold the 100 estimates.
    let t0 = 1_795_000_020_000_000_000u64;
    let rows: Vec<Record> = (0..100)
        .map(|i| rec("a->b", "rtt", t0 + i * 60_000_000_000, i as f64))
        .collect();
    s.insert(&rows).unwrap();
    let now = t0 + 100 * 60_000_000_000;
    assert_eq!(s.apply_retention(now).unwrap(), 90);
    assert_eq!(s.count().unwrap(), 10);
    assert_eq!(s.apply_retention(now).unwrap(), 0, "nothing left to delete");
    let agg = s
        .scale("a->b", "rtt", Duration::from_secs(60), 100, now)
        .unwrap();
    assert_eq!((agg.points.len(), agg.complete), (100, true));
    assert!(close(&agg.points, &brute(&rows, 60_000_000_000, 0, now)));
    let raw = s
        .scale("a->b", "rtt", Duration::from_secs(7), 1000, now)
        .unwrap();
    assert_eq!(raw.source, "raw");
    assert!(!raw.complete, "needs deleted rows");
    assert_eq!(raw.points.len(), 10, "the rows kept still answer");
}

/// A raw answer starting exactly at the retention horizon is complete; one step earlier is
/// not.
pub fn retention_horizon_is_exact(make: Make<'_>) {
    let keep = Duration::from_secs(2 * 3600);
    let mut s = make(keep);
    let step = 7_000_000_000u64;
    let cut = 1_795_000_036_000_000_000u64 / step * step;
    s.insert(&[
        rec("a->b", "rtt", cut - 1, 1.0),
        rec("a->b", "rtt", cut, 2.0),
    ])
    .unwrap();
    let now = cut + keep.as_nanos() as u64;
    assert_eq!(s.apply_retention(now).unwrap(), 1);
    let end = cut + 10 * step;
    for (count, complete) in [(10, true), (11, false)] {
        let a = s
            .scale("a->b", "rtt", Duration::from_nanos(step), count, end)
            .unwrap();
        assert_eq!(
            (a.source.as_str(), a.complete),
            ("raw", complete),
            "{count} steps"
        );
        assert_eq!(a.points.len(), 1);
    }
}

/// Estimates at the same time: `latest` is the first stored, a step's `last` and `range`'s
/// order follow insertion.
pub fn ties_keep_insertion_order(make: Make<'_>) {
    let mut s = make(Duration::from_secs(86_400));
    let t = 1_795_000_000_000_000_000u64;
    let (a, b) = (rec("a->b", "rtt", t, 1.0), rec("a->b", "rtt", t, 2.0));
    s.insert(&[rec("a->b", "rtt", t - 5, 9.0)]).unwrap();
    s.insert(std::slice::from_ref(&a)).unwrap();
    s.insert(std::slice::from_ref(&b)).unwrap();
    assert_eq!(s.latest("a->b", "rtt").unwrap(), Some(a.clone()));
    for step in [60u64, 3600, 7] {
        let p = s
            .scale("a->b", "rtt", Duration::from_secs(step), 1, t + 1)
            .unwrap();
        assert_eq!(p.points[0].last, 2.0, "step {step}");
        assert_eq!(p.points[0].n, 3, "step {step}");
    }
    assert_eq!(s.range("a->b", "rtt", t, t + 1, 10).unwrap(), vec![a, b]);
}

/// Bad input is refused before anything is stored (all or none), with `Error::BadInput`.
pub fn bad_input_is_refused_whole(make: Make<'_>) {
    let mut s = make(Duration::from_secs(60));
    let good = rec("a->b", "avail_bw", 1, 1.0);
    let is_bad = |r: Result<(), Error>| matches!(r, Err(Error::BadInput(_)));
    assert!(is_bad(
        s.insert(&[good.clone(), rec("a->b", "avail_bw", 2, f64::NAN)])
    ));
    assert_eq!(s.count().unwrap(), 0, "all or none");
    assert!(is_bad(s.insert(&[rec("", "x", 1, 1.0)])));
    assert!(is_bad(s.insert(&[rec(&"p".repeat(201), "x", 1, 1.0)])));
    assert!(is_bad(s.insert(&[rec("a->b", &"m".repeat(65), 1, 1.0)])));
    assert!(is_bad(s.insert(&[rec("a->b", "x", 1, f64::INFINITY)])));
    assert!(is_bad(s.insert(&[rec("a->b", "x", u64::MAX, 1.0)])));
    for t in [f64::NAN, -1.0, f64::INFINITY] {
        let mut r = rec("a->b", "x", 1, 1.0);
        r.timescale_ms = Some(t);
        assert!(is_bad(s.insert(&[r])), "timescale_ms {t}");
    }
    for (step, count) in [
        (Duration::from_millis(1500), 10),
        (Duration::from_secs(1), 0),
        (Duration::from_secs(0), 10),
        (Duration::from_secs(1), 100_001),
    ] {
        assert!(
            matches!(
                s.scale("a->b", "avail_bw", step, count, 10),
                Err(Error::BadInput(_))
            ),
            "{step:?} x{count}"
        );
    }
    s.insert(&[]).unwrap();
    s.insert(&[good]).unwrap();
    assert_eq!(s.count().unwrap(), 1);
}

/// Questions about series with no estimates: nothing, not an error.
pub fn unknown_series_are_empty(make: Make<'_>) {
    let s = make(Duration::from_secs(60));
    assert!(s.latest("nope", "x").unwrap().is_none());
    assert!(s.series().unwrap().is_empty());
    assert!(s.range("nope", "x", 0, u64::MAX, 10).unwrap().is_empty());
    for step in [1u64, 60, 3600] {
        let a = s
            .scale(
                "nope",
                "x",
                Duration::from_secs(step),
                10,
                1_000_000_000_000,
            )
            .unwrap();
        assert!(a.points.is_empty() && a.complete, "step {step}");
    }
}

/// Every field comes back as stored, the whole u64 and u32 ranges included.
pub fn round_trips_every_field(make: Make<'_>) {
    let mut s = make(Duration::from_secs(86_400));
    let mut r = rec("x->y", "loss", i64::MAX as u64, 0.25);
    r.low = -1.5;
    r.high = f64::MAX;
    r.method = "auto:slops".into();
    r.source = "passive".into();
    r.probe_bytes = u64::MAX;
    r.trains = u32::MAX;
    r.confidence = 0.125;
    r.elapsed_s = 1e-9;
    r.final_ = false;
    r.timescale_ms = Some(912.5);
    // A record that states no time scale keeps saying so.
    let none = rec("x->y", "rtt", 5, 0.04);
    s.insert(&[r.clone(), none.clone()]).unwrap();
    assert_eq!(s.latest("x->y", "loss").unwrap(), Some(r));
    assert_eq!(s.latest("x->y", "rtt").unwrap(), Some(none));
}

/// Maps: the newest of each coordinator comes back whole, the history is bounded, bad maps are
/// refused and leave nothing behind.
pub fn maps_keep_the_newest_per_coordinator(make: Make<'_>) {
    use crate::{StoredMap, MAPS_KEPT, MAX_MAP_BYTES};
    let mut s = make(Duration::from_secs(3600));
    assert!(s.latest_maps().unwrap().is_empty());
    let map = |c: &str, t_ns: u64| StoredMap {
        coordinator: c.into(),
        t_ns,
        json: format!("{{\"t\":{t_ns},\"by\":\"{c}\",\"ü\":\"\\u00fc\"}}"),
    };
    // Out of time order, more than are kept, two coordinators.
    for i in (0..MAPS_KEPT as u64 + 5).rev() {
        s.put_map(&map("198.18.0.1:7240", 1_000 + i)).unwrap();
    }
    s.put_map(&map("[2001:db8::1]:7240", 500)).unwrap();
    let got = s.latest_maps().unwrap();
    assert_eq!(
        got,
        vec![
            map("198.18.0.1:7240", 1_000 + MAPS_KEPT as u64 + 4),
            map("[2001:db8::1]:7240", 500)
        ]
    );
    // An older map arriving late does not replace the newest.
    s.put_map(&map("[2001:db8::1]:7240", 400)).unwrap();
    assert_eq!(s.latest_maps().unwrap()[1].t_ns, 500);
    for bad in [
        map("", 1),
        StoredMap {
            json: "x".repeat(MAX_MAP_BYTES + 1),
            ..map("a", 1)
        },
        map("a", u64::MAX),
    ] {
        assert!(
            matches!(s.put_map(&bad), Err(Error::BadInput(_))),
            "refused"
        );
    }
    assert_eq!(s.latest_maps().unwrap().len(), 2);
}

/// Client-created queries: kept in creation order, replaced by id, deleted once, bad ids refused.
pub fn queries_are_kept_replaced_and_deleted(make: Make<'_>) {
    let mut s = make(Duration::from_secs(60));
    assert!(s.queries().unwrap().is_empty());
    s.put_query("q-b", r#"{"peer":"b"}"#).unwrap();
    s.put_query("q-a", r#"{"peer":"a"}"#).unwrap();
    s.put_query("q-b", r#"{"peer":"b2"}"#).unwrap();
    assert_eq!(
        s.queries().unwrap(),
        vec![
            ("q-b".to_string(), r#"{"peer":"b2"}"#.to_string()),
            ("q-a".to_string(), r#"{"peer":"a"}"#.to_string()),
        ]
    );
    assert!(s.delete_query("q-b").unwrap());
    assert!(!s.delete_query("q-b").unwrap(), "deleted once");
    assert!(matches!(s.put_query("", "{}"), Err(Error::BadInput(_))));
    let long = "x".repeat(crate::MAX_QUERY_SPEC + 1);
    assert!(matches!(s.put_query("q", &long), Err(Error::BadInput(_))));
    assert_eq!(s.queries().unwrap().len(), 1);
}

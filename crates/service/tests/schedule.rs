//! The service keeps a path fresh on schedule and within its byte budget, counted at the
//! testbed's bottleneck.

mod common;

use mgrp_engine::auth::Key;
use mgrp_testbed::{Role, Testbed};

/// Run the service in snd for `secs` with `config`; the bytes snd offered the bottleneck, the
/// stored A estimates (time, value) and the counters.
fn run(
    tb: &Testbed,
    key: &Key,
    config: &str,
    secs: u64,
) -> (
    f64,
    Vec<(u64, f64)>,
    mgrp_service::CounterSnapshot,
    mgrp_service::ScheduleView,
) {
    let r = common::run_service(tb, key, config, secs);
    let recs = r.recs.iter().map(|r| (r.t_ns, r.value)).collect();
    (r.bytes_at_bottleneck, recs, r.counters, r.view)
}

#[test]
fn keeps_a_path_fresh_within_its_budget() {
    mgrp_testbed::stolen::unless_stolen("keeps_a_path_fresh_within_its_budget", |_| {
        let tb = common::testbed_at(20_000_000);
        let (_agent, key) = common::agent_at_rcv(&tb);
        let peer = Role::Rcv.addr();
        // A generous budget: an estimate about every second.
        let (_, recs, c, _) = run(
            &tb,
            &key,
            &format!(
            "[[path]]\npeer = \"{peer}\"\nmethod = \"chirp\"\nevery = \"1s\"\nbudget = \"20mb\""
        ),
            6,
        );
        assert!(recs.len() >= 3, "{recs:?} {c:?}");
        for w in recs.windows(2) {
            let gap = (w[1].0 - w[0].0) as f64 / 1e9;
            assert!(
                (0.5..2.5).contains(&gap),
                "estimates {gap} s apart: {recs:?}"
            );
        }
        // The schedule's estimates are real ones: the median is plausible for 20 Mbit/s. A single
        // chirp estimate can miss wildly (a CI run: 58.9 Mbit/s, one of six; such misses are issue
        // 20's, measured by `mgrp bench accuracy`), so each one is only held to be a rate.
        assert!(
            recs.iter().all(|(_, v)| v.is_finite() && *v > 0.0),
            "{recs:?}"
        );
        let mut values: Vec<f64> = recs.iter().map(|(_, v)| *v).collect();
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        assert!(median > 1e6 && median < 40e6, "median {median}: {recs:?}");
        assert_eq!(c.skipped_for_budget + c.cut_by_budget, 0, "{c:?}");
        // A tight budget: 300 KiB a minute binds within seconds, and the bottleneck saw no more
        // than that (plus Ethernet/IP/UDP headers, ≤ 5% on 1000+ byte probes, and control frames).
        let budget = 300.0 * 1024.0;
        let (bytes, _, c, view) = run(
            &tb,
            &key,
            &format!(
            "[[path]]\npeer = \"{peer}\"\nmethod = \"chirp\"\nevery = \"1s\"\nbudget = \"300kb\""
        ),
            6,
        );
        assert!(
            c.cut_by_budget + c.skipped_for_budget >= 1,
            "the budget never bound: {c:?}"
        );
        assert!(c.probe_bytes as f64 <= budget, "{c:?}");
        assert!(
            bytes <= budget * 1.05 + 30_000.0,
            "{bytes} bytes at the bottleneck, {c:?}"
        );
        // And it says so, rather than serving the old value silently.
        assert!(view.budget_exhausted, "{view:?}");
        assert!(
            view.last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("probe byte budget exhausted")),
            "{view:?}"
        );
        assert!(view.budget_configured && view.budget_bytes_per_min == 300 * 1024);
        // No budget configured: the default, derived from the method's cost at the path's
        // capacity, fits every estimate.
        let (_, recs, c, view) = run(
            &tb,
            &key,
            &format!("[[path]]\npeer = \"{peer}\"\nmethod = \"chirp\"\nevery = \"1s\""),
            6,
        );
        assert!(recs.len() >= 3, "{recs:?} {c:?}");
        assert_eq!(c.skipped_for_budget + c.cut_by_budget, 0, "{c:?}");
        assert!(
            !view.budget_configured && !view.budget_exhausted,
            "{view:?}"
        );
        assert!(view.budget_bytes_per_min >= 2_000_000, "{view:?}");
    })
}

#[test]
fn a_round_past_its_deadline_stores_no_estimate_and_says_so() {
    // pathload's own pacing at 2 Mbit/s: its streams last 10× longer than at 20 Mbit/s, where a
    // search took 11–21 s here (four runs), so no round concludes within the 15 s deadline.
    let tb = common::testbed_at(2_000_000);
    let (_agent, key) = common::agent_at_rcv(&tb);
    let peer = Role::Rcv.addr();
    let deadline = mgrp_service::ROUND_DEADLINE.as_secs();
    let (_, recs, c, view) = run(
        &tb,
        &key,
        &format!(
            "[[path]]\npeer = \"{peer}\"\nmethod = \"slops-slow\"\nevery = \"1s\"\nbudget = \"100mb\""
        ),
        deadline + 3,
    );
    assert!(recs.is_empty(), "a partial search was stored: {recs:?}");
    assert_eq!(c.timed_out, 1, "{c:?}");
    assert!(c.probe_bytes > 0 && c.errors == 0, "{c:?}");
    assert!(
        view.last_error
            .as_deref()
            .is_some_and(|e| e.contains(&format!("{deadline} s deadline"))),
        "{view:?}"
    );
}

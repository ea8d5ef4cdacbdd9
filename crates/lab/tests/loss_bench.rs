//! `mgrp bench loss`, both scenarios, short: badabing runs through the Probe API, within its
//! probe load, and the drop log sees the episodes it is judged against. Needs root; about 40 s.
//! (Accuracy needs minutes of slots: it is the bench's, in docs/results/loss.md.)

use mgrp_lab::loss_bench::{self, LossConfig};
use mgrp_lab::Hooks;

fn leftovers() -> Vec<String> {
    let mine = format!("mgrp-t{}-", std::process::id());
    mgrp_testbed::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&mine))
        .collect()
}

#[test]
fn short_runs_probe_within_the_load_and_see_the_drops() {
    mgrp_testbed::stolen::unless_stolen(
        "short_runs_probe_within_the_load_and_see_the_drops",
        |_| {
            let cfg = LossConfig {
                secs: 6.0,
                reps: 1,
                ..LossConfig::new(true)
            };
            let rows =
                loss_bench::run(&cfg, Hooks::quiet()).expect("bench runs (this test needs root)");
            assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
            assert_eq!(rows.len(), 2);
            for r in &rows {
                let b = &r.badabing;
                let why = format!("{r:?}");
                // 3 batches of 200 slots: 597 possible starts at p = 0.3, 179 ± 11 (sd) experiments.
                assert!((120..=240).contains(&b.experiments), "{why}");
                assert_eq!(b.batches_discarded, 0, "{why}");
                assert_eq!(b.trains, 3, "{why}");
                // The target's load: under 1% of the measured capacity (planned: 0.79 Mbit/s of ~96).
                assert!(r.load_share > 0.0 && r.load_share < 0.01, "{why}");
                // The baseline sends about as much (the same frames per second over its own trains).
                assert!((r.ping.load_bps / r.load_bps - 1.0).abs() < 0.2, "{why}");
                // Both scenarios drop: on/off peaks of 150 Mbit/s overflow the 30-packet buffer every
                // ~250 ms, the loss line is in a bad state ~9% of the time; in 6 s both give episodes,
                // and badabing's probes meet some of them.
                assert!(r.truth.episodes >= 3 && r.truth.drops > 0, "{why}");
                assert!(r.truth.frequency > 0.0 && r.truth.frequency < 0.5, "{why}");
                assert!(b.frequency > 0.0 && b.probes_lost > 0, "{why}");
            }
        },
    )
}

//! A `loss_episodes` schedule runs badabing over the path and stores episode frequency,
//! duration and probe loss, on a testbed path with bursty loss.

mod common;

use mgrp_service::config::ServiceConfig;
use mgrp_service::Service;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{DelayMode, LossModel, Role, Testbed, TestbedConfig};
use std::time::Duration;

#[test]
fn a_loss_episodes_schedule_stores_episodes() {
    mgrp_testbed::stolen::unless_stolen("a_loss_episodes_schedule_stores_episodes", |_| {
        let tb = Testbed::up(
            TestbedConfig {
                capacity_bps: 20_000_000,
                measure_capacity: false,
                // Bursts of 2 probes on average, 9.1% of probes lost in the long run.
                loss: Some(LossModel::parse("ge:p=5%,r=50%").unwrap()),
                ..Default::default()
            },
            DelayMode::Thread,
        )
        .unwrap();
        let (_agent, key) = common::agent_at_rcv(&tb);
        let peer = Role::Rcv.addr();
        // Rounds of 2 s (200 slots, ~60 experiments) every 2 s.
        let cfg = ServiceConfig::parse(&format!(
            "[[path]]\npeer = \"{peer}\"\nmethod = \"loss_episodes\"\nevery = \"2s\""
        ))
        .unwrap();
        let (recs, counters) = spawn_in(&tb.ns(Role::Snd), "service", move || {
            let svc = Service::start(&cfg, key).unwrap();
            std::thread::sleep(Duration::from_secs(7));
            let store = svc.store();
            let counters = svc.stop();
            let s = store.lock().unwrap();
            let mut recs = Vec::new();
            for (p, m) in s.series().unwrap() {
                recs.extend(s.range(&p, &m, 0, u64::MAX, 1000).unwrap());
            }
            Ok((recs, counters))
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
        let of = |m: &str| recs.iter().filter(|r| r.metric == m).collect::<Vec<_>>();
        let (freq, loss) = (of("episode_frequency"), of("loss"));
        assert!(
            !freq.is_empty() && freq.len() == loss.len(),
            "{recs:?} {counters:?}"
        );
        // Every record is badabing's, with what it cost.
        for r in &recs {
            assert_eq!(r.method, "loss_episodes", "{r:?}");
            assert!(r.probe_bytes > 0 && r.trains >= 1, "{r:?}");
        }
        // The line loses ~9% of the probes in bursts: every round of ~300 probes saw some
        // (P(none) = 0.95^300 < 1e-6; sd of a round's rate ≈ 3%), and episodes (~18% of slots
        // have a lost probe, sd ≈ 4%) cover some but not all of the time.
        for (f, l) in freq.iter().zip(&loss) {
            assert!(l.value > 0.0 && l.value < 0.3, "{l:?}");
            assert!(f.value > 0.0 && f.value < 0.5, "{f:?}");
            assert!(f.low <= f.value && f.value <= f.high, "{f:?}");
        }
        assert!(of("episode_duration").iter().all(|d| d.value >= 0.01));
        let lost = tb.loss_stats().unwrap();
        assert!(lost.lost > 0, "{lost:?}");
        // What was stored was counted (a round cut by the stop may have counted without storing).
        assert!(counters.probe_bytes >= freq.iter().map(|r| r.probe_bytes).sum::<u64>());
    })
}

//! MediaNet (`examples/medianet`) on the testbed with a running agent, short: the streams are
//! decoded at the receiver, and the global scheduler gets the agent's estimates over the HTTP
//! API's event stream and acts on them. Needs root; about 50 s. (The figures are the bench's:
//! `mgrp bench medianet`, docs/results/medianet.md.)

use mgrp_lab::medianet_bench::{self, MedianetConfig};
use mgrp_lab::Hooks;
use mgrp_medianet::workload::Level;

fn leftovers() -> Vec<String> {
    let mine = format!("mgrp-t{}-", std::process::id());
    mgrp_testbed::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&mine))
        .collect()
}

#[test]
fn the_streams_decode_and_the_scheduler_follows_the_agents_estimates_over_sse() {
    mgrp_testbed::stolen::unless_stolen(
        "the_streams_decode_and_the_scheduler_follows_the_agents_estimates_over_sse",
        |_| {
            let cfg = MedianetConfig {
                configs: vec!["auto".into()],
                duration_s: 40.0,
                ..MedianetConfig::default()
            };
            let report =
                medianet_bench::run(&cfg, Hooks::quiet()).expect("bench runs (needs root)");
            assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
            let r = &report.runs[0];
            let why = format!(
                "{:?}",
                (
                    r.fps,
                    r.decoded_frames,
                    r.estimates,
                    r.agent_client,
                    &r.sender_error,
                    r.bad_frame_ratio
                )
            );
            assert!(r.sender_error.is_none(), "{why}");
            // Events came over SSE and reached the scheduler as estimates.
            let [connects, events, from_api, _, _, _] = r.agent_client;
            assert!(connects >= 1 && events >= 1 && from_api >= 1, "{why}");
            assert!(r.estimates >= 1, "{why}");
            // It acted on them: with no estimate the streams stay at low (2 fps each, 6 in all); the
            // schedule here has A ≥ 2 Mbit/s throughout (C 10 − at most 8 of cross traffic), so an
            // estimate lifts at least one stream. Decoded frames above 6 fps show it, and so does a
            // second with every stream at full.
            assert!(r.fps > 6.5, "{why}");
            assert!(
                r.timeline
                    .iter()
                    .any(|s| s.levels.len() == 3 && s.levels.iter().all(|l| *l == Level::High)),
                "{why}"
            );
            // What was decoded fits the bottleneck the testbed measured.
            assert!(r.decoded_mbit < r.capacity_measured_mbit, "{why}");
            // Most frames the levels called for decoded: level changes under PEAKS cost some (the
            // 30–60 s runs so far lost 2–11%), a broken stream would lose most.
            assert!(r.bad_frame_ratio < 0.3, "{why}");
        },
    )
}

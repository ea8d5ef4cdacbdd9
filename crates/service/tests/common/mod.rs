//! What the service's testbed tests share: a testbed and an agent at rcv.
#![allow(dead_code)]

use mgrp_engine::auth::Key;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{DelayMode, Role, Testbed, TestbedConfig};

/// A testbed at `capacity_bps` (other settings default).
pub fn testbed_at(capacity_bps: u64) -> Testbed {
    Testbed::up(
        TestbedConfig {
            capacity_bps,
            ..Default::default()
        },
        DelayMode::Thread,
    )
    .expect("testbed (needs root)")
}

/// An agent at rcv (port 7240) with a fresh key: the agent (keep it alive) and its key.
pub fn agent_at_rcv(tb: &Testbed) -> (Agent, Key) {
    let key = Key::random();
    let listen: std::net::SocketAddr = format!("{}:7240", Role::Rcv.addr()).parse().unwrap();
    let k = key.clone();
    let agent = spawn_in(&tb.ns(Role::Rcv), "agent", move || {
        Ok(Agent::start(AgentConfig::new(listen, k)).unwrap())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    (agent, key)
}

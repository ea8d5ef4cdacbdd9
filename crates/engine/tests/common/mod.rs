//! What the engine's namespace tests share. Each test binary uses a part of it.
#![allow(dead_code)]

use mgrp_engine::auth::Key;
use mgrp_testbed::{DelayMode, Testbed, TestbedConfig};

/// Pacers pin themselves to the same CPU: tests that time trains must not overlap.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Hold [`SERIAL`] for the rest of a test (a test that panicked before does not poison it).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn key() -> Key {
    Key::from_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f").unwrap()
}

/// A testbed whose bottleneck does not limit the tests (1 Gbit/s).
pub fn testbed() -> Testbed {
    testbed_at(1_000_000_000)
}

/// A testbed with this bottleneck rate, the other settings default.
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

//! The I/O under [`crate::trace`]: send its trains over a session and fold the results.

use crate::trace::{parallel_train, Round, TraceConfig, TraceReport, Tracer};
use crate::Error;
use mgrp_engine::client::Session;
use std::time::{Duration, Instant};

/// Trace the path to the session's peer agent: `cfg.runs` parallel rounds, the minimum per
/// hop as base. `stop()` ends it early (the report covers the rounds done). Each round waits
/// for silent routers at most the engine's hop wait (1 s after its last probe).
pub fn trace(
    session: &mut Session,
    cfg: &TraceConfig,
    mut stop: impl FnMut() -> bool,
) -> Result<TraceReport, Error> {
    let mut t = Tracer::new(*cfg)?;
    while let Some(spec) = t.poll_train() {
        if stop() {
            break;
        }
        let r = session.send_train(&spec)?;
        t.handle_train(&spec, &r);
    }
    let mut rep = t.report(&session.peer().to_string());
    rep.control_rtt_ns = session.control_rtt().map(|(rtt, _)| rtt.as_nanos() as u64);
    Ok(rep)
}

/// The parallel traceroute Tneck samples: `rounds` rounds of TTL 1..=`hops` (one train each,
/// probes `gap_ns` apart), one every `every` at most, each handed to `on_round` as it comes
/// (return `false` to stop). The delay vector of a round is [`Round::delays`].
///
/// A round lasts at least the agent's linger for missing probes (300 ms: TTL-limited probes
/// never reach it), so rounds come no faster than about three a second.
pub fn parallel_traceroute(
    session: &mut Session,
    hops: u8,
    size: u16,
    gap_ns: u64,
    rounds: u32,
    every: Duration,
    mut on_round: impl FnMut(&Round) -> bool,
) -> Result<Vec<Round>, Error> {
    let spec = parallel_train(hops, size, gap_ns)?;
    let mut out = Vec::new();
    let mut next = Instant::now();
    for _ in 0..rounds {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next = Instant::now() + every;
        let r = session.send_train(&spec)?;
        let round = Round::of(&spec, &r);
        let go_on = on_round(&round);
        out.push(round);
        if !go_on {
            break;
        }
    }
    Ok(out)
}

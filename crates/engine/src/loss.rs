//! The badabing prober's thin driver (`mgrp_estimate::badabing` holds the logic): hands each
//! batch's train to whatever sends it — the Probe API, as a third-party prober would, or a
//! session in-process (the service) — and feeds the result back.

use crate::api::{self, ApiRequest};
use crate::client::Session;
use crate::train::{TrainResult, TrainSpec};
use crate::Error;
use mgrp_estimate::badabing::{Badabing, LossEpisodes};
use std::path::Path;
use std::time::{Duration, Instant};

/// Run `b` until it is done, `deadline` passes or `stop()` says so, sending each train with
/// `send`; `progress` sees the episodes after every train. Returns the last report.
pub fn run_badabing(
    b: &mut Badabing,
    mut send: impl FnMut(&TrainSpec) -> Result<TrainResult, Error>,
    deadline: Instant,
    mut stop: impl FnMut() -> bool,
    mut progress: impl FnMut(&Badabing),
) -> Result<Option<LossEpisodes>, Error> {
    while Instant::now() < deadline && !stop() {
        let Some(spec) = b.poll_train(mgrp_clock::now_ns()) else {
            break;
        };
        let r = send(&spec)?;
        b.handle_train(mgrp_clock::now_ns(), &r);
        progress(b);
    }
    Ok(b.report())
}

/// A sender through an agent's Probe API at `socket` to `peer` (`IP` or `IP:PORT`). A train
/// lasts as long as its slots, so the wait for its result allows for that.
pub fn via_api<'a>(
    socket: &'a Path,
    peer: &'a str,
) -> impl FnMut(&TrainSpec) -> Result<TrainResult, Error> + 'a {
    move |spec| {
        let req = ApiRequest {
            peer: peer.to_string(),
            train: Some(spec.clone()),
            count: None,
            size: None,
            gap_ns: None,
        };
        let timeout = Duration::from_nanos(spec.planned_ns()) + Duration::from_secs(5);
        api::request(socket, &req, timeout)
    }
}

/// A sender over an open session (in-process, as the service runs it).
pub fn via_session(s: &mut Session) -> impl FnMut(&TrainSpec) -> Result<TrainResult, Error> + '_ {
    move |spec| s.send_train(spec)
}

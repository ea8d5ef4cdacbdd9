//! The relaying agent's side of [`crate::relay`]: open a session to the third agent with this
//! agent's key and pacer, then answer each call with what that session did. The request was
//! admitted by [`crate::proto::receiver`] (authenticated session, no train measured, duration
//! capped); here the agent-wide limit and the per-relay byte limits are enforced, and every
//! refusal goes back as an answer the coordinator can read.

use super::conn::{ClientConn, Conn, RecvError};
use crate::client::Session;
use crate::daemon::{bump, Shared};
use crate::load::LoadFlow;
use crate::proto::encode;
use crate::relay::{RelayRequest, RelayResponse, RELAY_LOAD_BYTES, RELAY_TRAIN_BYTES};
use mgrp_wire::control::{code, Control};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Relays the agent runs at once, over all coordinators.
pub const MAX_RELAYS: usize = 8;
/// How often the loop looks at the agent's stop flag while waiting for a call.
const TICK: Duration = Duration::from_millis(200);

/// Holds one of the agent's relay slots while it lives.
struct Slot<'a>(&'a Shared);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.relays_active.fetch_sub(1, Ordering::Relaxed);
    }
}

fn take_slot(s: &Shared) -> Option<Slot<'_>> {
    if s.relays_active.fetch_add(1, Ordering::Relaxed) >= MAX_RELAYS {
        s.relays_active.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    Some(Slot(s))
}

fn answer(conn: &mut ClientConn, r: &RelayResponse) -> bool {
    match serde_json::to_vec(r) {
        Ok(body) => conn.send(&Control::RelayReply { body }).is_ok(),
        Err(_) => false,
    }
}

/// What the relayed session is now.
enum Hands {
    Session(Box<Session>),
    Load(LoadFlow),
    Done,
}

/// Serve one relay on `conn` until `until`, the coordinator closing, or the agent stopping.
pub fn serve(conn: &mut Conn, dst: SocketAddr, until: Instant, s: &Shared) {
    let Some(_slot) = take_slot(s) else {
        bump(&s.counters.relays_refused);
        let _ = conn.write(&encode(&Control::Error {
            code: code::RELAY,
            message: format!("relay refused: this agent already runs {MAX_RELAYS} relays"),
        }));
        return;
    };
    let Ok(stream) = conn.stream.try_clone() else {
        return;
    };
    let mut ctrl = ClientConn::new(stream);
    let session = match Session::connect(dst, &s.key, s.pacer.clone(), Duration::from_secs(3)) {
        Ok(x) => x,
        Err(e) => {
            bump(&s.counters.relays_refused);
            answer(&mut ctrl, &RelayResponse::Error(e.to_string()));
            return;
        }
    };
    bump(&s.counters.relays);
    let ready = RelayResponse::Ready {
        local: session.local(),
        control_rtt_ns: session
            .control_rtt()
            .map(|(a, b)| (a.as_nanos() as u64, b.as_nanos() as u64)),
    };
    if !answer(&mut ctrl, &ready) {
        return;
    }
    let mut hands = Hands::Session(Box::new(session));
    let mut train_bytes = 0u64;
    while !s.stop.load(Ordering::Relaxed) && Instant::now() < until {
        let body = match ctrl.recv(Instant::now() + TICK) {
            Ok(Some(Control::RelayCall { body })) => body,
            Ok(Some(Control::Close)) | Err(RecvError::Proto(_)) | Err(RecvError::Io(_)) => break,
            Ok(Some(_)) => {
                answer(
                    &mut ctrl,
                    &RelayResponse::Error("only relay calls on a relay".into()),
                );
                break;
            }
            Ok(None) => continue,
        };
        bump(&s.counters.relay_calls);
        let req: RelayRequest = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                answer(
                    &mut ctrl,
                    &RelayResponse::Error(format!("unreadable call: {e}")),
                );
                break;
            }
        };
        let (next, reply) = step(hands, req, &mut train_bytes, until);
        hands = next;
        if !answer(&mut ctrl, &reply) {
            break;
        }
    }
    if let Hands::Load(f) = hands {
        f.stop();
    }
}

/// One call: what the hands become and the answer.
fn step(
    hands: Hands,
    req: RelayRequest,
    train_bytes: &mut u64,
    until: Instant,
) -> (Hands, RelayResponse) {
    let err = |h, m: String| (h, RelayResponse::Error(m));
    match (hands, req) {
        (Hands::Session(mut session), RelayRequest::Train(spec)) => {
            let bytes = spec.bytes();
            if *train_bytes + bytes > RELAY_TRAIN_BYTES {
                return err(
                    Hands::Session(session),
                    format!("relay train budget of {RELAY_TRAIN_BYTES} bytes spent"),
                );
            }
            *train_bytes += bytes;
            match session.send_train(&spec) {
                Ok(r) => (Hands::Session(session), RelayResponse::Train(Box::new(r))),
                Err(e) => err(Hands::Session(session), e.to_string()),
            }
        }
        // The far agent refuses it too (a train's report would be lost in the flow).
        (Hands::Session(session), RelayRequest::Load { .. }) if *train_bytes > 0 => err(
            Hands::Session(session),
            "a relayed session that sent trains cannot become a load: open another relay".into(),
        ),
        (Hands::Session(session), RelayRequest::Load { max_ms, budget, cc }) => {
            let left = until.saturating_duration_since(Instant::now());
            let max = Duration::from_millis(max_ms as u64).min(left);
            match session.into_load(max, budget.min(RELAY_LOAD_BYTES), cc.as_deref()) {
                Ok(f) => (Hands::Load(f), RelayResponse::Loading),
                Err(e) => err(Hands::Done, e.to_string()),
            }
        }
        (Hands::Load(f), RelayRequest::Sample) => {
            if f.finished() {
                let failed_report = f.stop();
                let failed = failed_report.failed;
                return (
                    Hands::Done,
                    RelayResponse::Stopped {
                        report: failed_report,
                        failed,
                    },
                );
            }
            match f.sample() {
                Ok(x) => (Hands::Load(f), RelayResponse::Sample(x)),
                Err(e) => err(Hands::Load(f), e.to_string()),
            }
        }
        (Hands::Load(f), RelayRequest::Stop) => {
            let report = f.stop();
            let failed = report.failed;
            (Hands::Done, RelayResponse::Stopped { report, failed })
        }
        (h, RelayRequest::Stop) => (h, RelayResponse::Error("no load flow to stop".into())),
        (h, _) => err(
            h,
            "call not possible now (after Load: only Sample and Stop; after Stop: nothing)".into(),
        ),
    }
}

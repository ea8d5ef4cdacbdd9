//! Relays: one agent's hands for another. A Netmapper coordinator maps the paths *between*
//! other agents by asking agent X to open a session to agent Y and to send trains and run a
//! load flow there on its behalf; X answers each call with what its own session saw. The
//! calls and answers are JSON in [`Control::RelayCall`]/[`Control::RelayReply`] frames on a
//! connection of their own (authenticated like any session).
//!
//! Safety: X only ever talks to an agent that proves it knows the key (the relayed session
//! does the full handshake before a probe leaves), so a relay cannot aim traffic at an
//! arbitrary host; a relay lasts at most [`MAX_RELAY`](crate::proto::MAX_RELAY), sends at most
//! [`RELAY_TRAIN_BYTES`] of trains, its load flow is capped like any load, and an agent runs at
//! most [`MAX_RELAYS`](crate::driver::relay::MAX_RELAYS) at once.

use crate::auth::Key;
use crate::client::Session;
use crate::driver::conn::{ClientConn, RecvError};
use crate::load::{LoadReport, LoadSample};
use crate::pacer::Pacer;
use crate::Error;
use mgrp_train::{TrainResult, TrainSpec};
use mgrp_wire::control::{Control, MAX_RELAY_BODY};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Train bytes one relay may send in all.
pub const RELAY_TRAIN_BYTES: u64 = 256 << 20;
/// Load-flow bytes one relay may send.
pub const RELAY_LOAD_BYTES: u64 = 4 << 30;

/// A call on a relayed session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RelayRequest {
    Train(TrainSpec),
    /// Turn the relayed session into a load flow (no trains after this).
    Load {
        max_ms: u32,
        budget: u64,
        cc: Option<String>,
    },
    Sample,
    Stop,
}

/// The relay's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RelayResponse {
    /// The relayed session is up: X's address toward Y, and X's control RTT to Y (ns).
    Ready {
        local: Option<SocketAddr>,
        control_rtt_ns: Option<(u64, u64)>,
    },
    Train(Box<TrainResult>),
    Loading,
    Sample(LoadSample),
    Stopped {
        report: LoadReport,
        failed: bool,
    },
    Error(String),
}

/// How long a call may take at most before the coordinator gives up on it: a train's report
/// waits up to its timeout plus a hop wait at the relay.
const CALL_WAIT: Duration = Duration::from_secs(40);

/// The coordinator's end: a session from agent `via` to agent `dst`, run by `via`.
pub struct RelaySession {
    ctrl: ClientConn,
    via: SocketAddr,
    dst: SocketAddr,
    local: Option<SocketAddr>,
    control_rtt: Option<(Duration, Duration)>,
    loading: bool,
}

impl RelaySession {
    /// Ask the agent at `via` to open a session to `dst` for at most `max`. `pacer` serves
    /// only the short session to `via` (it sends no train).
    pub fn open(
        via: SocketAddr,
        dst: SocketAddr,
        key: &Key,
        pacer: Arc<Pacer>,
        timeout: Duration,
        max: Duration,
    ) -> Result<RelaySession, Error> {
        let s = Session::connect(via, key, pacer, timeout)?;
        let ctrl = s.into_relay(dst, max)?;
        let mut r = RelaySession {
            ctrl,
            via,
            dst,
            local: None,
            control_rtt: None,
            loading: false,
        };
        // X connects to Y (up to its own 3 s timeout) before it answers.
        match r.wait(timeout + Duration::from_secs(5))? {
            RelayResponse::Ready {
                local,
                control_rtt_ns,
            } => {
                r.local = local;
                r.control_rtt =
                    control_rtt_ns.map(|(a, b)| (Duration::from_nanos(a), Duration::from_nanos(b)));
                Ok(r)
            }
            other => Err(r.unexpected(&other)),
        }
    }

    /// The agent the trains go to.
    pub fn peer(&self) -> SocketAddr {
        self.dst
    }

    /// The relaying agent's address toward the peer.
    pub fn local(&self) -> Option<SocketAddr> {
        self.local
    }

    pub fn control_rtt(&self) -> Option<(Duration, Duration)> {
        self.control_rtt
    }

    /// Send a train from the relaying agent to the peer; its result as that agent saw it.
    pub fn send_train(&mut self, spec: &TrainSpec) -> Result<TrainResult, Error> {
        match self.call(&RelayRequest::Train(spec.clone()))? {
            RelayResponse::Train(r) => Ok(*r),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Turn the relayed session into a load flow from the relaying agent to the peer.
    pub fn into_load(
        mut self,
        max: Duration,
        budget: u64,
        cc: Option<&str>,
    ) -> Result<RelayLoad, Error> {
        let max_ms = max.as_millis().min(u32::MAX as u128) as u32;
        match self.call(&RelayRequest::Load {
            max_ms,
            budget,
            cc: cc.map(str::to_string),
        })? {
            RelayResponse::Loading => {
                self.loading = true;
                Ok(RelayLoad {
                    s: self,
                    ended: None,
                })
            }
            other => Err(self.unexpected(&other)),
        }
    }

    fn call(&mut self, req: &RelayRequest) -> Result<RelayResponse, Error> {
        let body =
            serde_json::to_vec(req).map_err(|e| Error::BadInput(format!("relay call: {e}")))?;
        if body.len() > MAX_RELAY_BODY {
            return Err(Error::BadInput(format!(
                "relay call of {} bytes is over {MAX_RELAY_BODY}",
                body.len()
            )));
        }
        self.ctrl.send(&Control::RelayCall { body })?;
        self.wait(CALL_WAIT)
    }

    fn wait(&mut self, wait: Duration) -> Result<RelayResponse, Error> {
        let proto = |via: SocketAddr, cause| Error::Protocol {
            peer: via.to_string(),
            cause,
        };
        match self.ctrl.recv(Instant::now() + wait) {
            Ok(Some(Control::RelayReply { body })) => match serde_json::from_slice(&body) {
                Ok(RelayResponse::Error(e)) => Err(Error::io(
                    format!("relay via {} to {}", self.via, self.dst),
                    std::io::Error::other(e),
                )),
                Ok(r) => Ok(r),
                Err(e) => Err(Error::BadInput(format!(
                    "relay via {}: unreadable answer: {e}",
                    self.via
                ))),
            },
            Ok(Some(Control::Error { code, message })) => Err(proto(
                self.via,
                crate::proto::ProtoError::PeerError { code, message },
            )),
            Ok(Some(other)) => Err(proto(
                self.via,
                crate::proto::ProtoError::Unexpected(crate::proto::kind(&other)),
            )),
            Ok(None) => Err(Error::Timeout(format!(
                "relay via {} to {}: no answer within {wait:?}",
                self.via, self.dst
            ))),
            Err(RecvError::Proto(e)) => Err(proto(self.via, e)),
            Err(RecvError::Io(e)) => Err(Error::io(format!("read from {}", self.via), e)),
        }
    }

    fn unexpected(&self, r: &RelayResponse) -> Error {
        Error::BadInput(format!(
            "relay via {} to {}: unexpected answer {r:?}",
            self.via, self.dst
        ))
    }
}

/// A load flow run by a relaying agent (see [`RelaySession::into_load`]).
pub struct RelayLoad {
    s: RelaySession,
    ended: Option<(LoadReport, bool)>,
}

impl RelayLoad {
    /// The flow's socket state at the relaying agent now.
    pub fn sample(&mut self) -> Result<LoadSample, Error> {
        match self.s.call(&RelayRequest::Sample)? {
            RelayResponse::Sample(x) => Ok(x),
            RelayResponse::Stopped { report, failed } => {
                self.ended = Some((report, failed));
                Err(Error::BadInput("the relayed load flow has ended".into()))
            }
            other => Err(self.s.unexpected(&other)),
        }
    }

    /// The flow ended by itself (its answer to a sample said so).
    pub fn finished(&self) -> bool {
        self.ended.is_some()
    }

    /// End the flow: what it did (a relay that cannot answer reports a failed, empty flow).
    pub fn stop(mut self) -> LoadReport {
        if let Some((mut r, failed)) = self.ended.take() {
            r.failed = failed;
            return r;
        }
        match self.s.call(&RelayRequest::Stop) {
            Ok(RelayResponse::Stopped { mut report, failed }) => {
                report.failed = failed;
                report
            }
            _ => LoadReport {
                seconds: 0.0,
                bytes_written: 0,
                bytes_acked: 0,
                retrans: 0,
                failed: true,
            },
        }
    }
}

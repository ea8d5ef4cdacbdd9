//! The Probe API: a local Unix-socket protocol for probers that are not built in.
//! One JSON object per line each way; see `docs/probe-api.md`. This module holds what a client
//! needs (the request and response, [`parse_peer`], [`request`]); the server is part of the
//! daemon ([`crate::daemon::api_server`]).

use crate::train::{TrainResult, TrainSpec};
use crate::{Error, DEFAULT_PORT};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Longest request line (a 10 000-probe train spelled out fits).
pub const MAX_REQUEST: usize = 4 << 20;
/// Most API clients served at once.
pub const MAX_CLIENTS: usize = 16;
/// Default socket path.
pub const DEFAULT_SOCKET: &str = "/run/mgrp/agent.sock";

/// A request: a train to a peer agent, spelled out (`train`) or uniform (`count`, `size`, `gap_ns`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApiRequest {
    /// The peer agent, `IP` or `IP:PORT` (default port 7240).
    pub peer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<TrainSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_ns: Option<u64>,
}

impl ApiRequest {
    /// The train asked for, spelled out or uniform, checked.
    pub fn spec(&self) -> Result<TrainSpec, Error> {
        let spec = match (&self.train, self.count, self.size, self.gap_ns) {
            (Some(t), None, None, None) => t.clone(),
            (None, Some(n), Some(l), Some(g)) => TrainSpec::uniform(n, l, g),
            _ => {
                return Err(Error::BadInput(
                    "give either `train` or all of `count`, `size`, `gap_ns`".into(),
                ))
            }
        };
        spec.validate()?;
        Ok(spec)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiResponse {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TrainResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What went wrong on the far side of the Probe API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("agent: {0}")]
    Agent(String),
    #[error("bad response from the Probe API at {socket}: {why}")]
    BadResponse { socket: String, why: String },
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Error {
        Error::Api(e)
    }
}

/// Turn one request line into a response, given a way to send the train.
pub fn answer(
    line: &[u8],
    send: impl FnOnce(SocketAddr, TrainSpec) -> Result<TrainResult, Error>,
) -> ApiResponse {
    let parsed = serde_json::from_slice::<ApiRequest>(line)
        .map_err(|e| Error::BadInput(format!("bad request: {e}")))
        .and_then(|req| Ok((parse_peer(&req.peer)?, req.spec()?)));
    match parsed.and_then(|(peer, spec)| send(peer, spec)) {
        Ok(r) => ApiResponse {
            ok: true,
            result: Some(r),
            error: None,
        },
        Err(e) => ApiResponse::error(e.to_string()),
    }
}

impl ApiResponse {
    pub fn error(e: String) -> ApiResponse {
        ApiResponse {
            ok: false,
            result: None,
            error: Some(e),
        }
    }
}

/// `IP` or `IP:PORT`.
pub fn parse_peer(s: &str) -> Result<SocketAddr, Error> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
        })
        .map_err(|_| Error::BadInput(format!("bad peer {s:?}: expected IP or IP:PORT")))
}

/// Submit a train through an agent's Probe API and wait for its result.
pub fn request(socket: &Path, req: &ApiRequest, timeout: Duration) -> Result<TrainResult, Error> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        Error::io(
            format!(
                "connect to the agent's Probe API at {} (is `mgrp agent --api` running?)",
                socket.display()
            ),
            e,
        )
    })?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| Error::io("Probe API timeout", e))?;
    let line = serde_json::to_string(req).map_err(|e| Error::BadInput(e.to_string()))?;
    writeln!(stream, "{line}").map_err(|e| Error::io("send Probe API request", e))?;
    let mut resp = String::new();
    BufReader::new(stream.take(64 << 20))
        .read_line(&mut resp)
        .map_err(|e| Error::io("read Probe API response", e))?;
    let r: ApiResponse = serde_json::from_str(&resp).map_err(|e| ApiError::BadResponse {
        socket: socket.display().to_string(),
        why: e.to_string(),
    })?;
    match (r.ok, r.result, r.error) {
        (true, Some(res), _) => Ok(res),
        (_, _, Some(e)) => Err(ApiError::Agent(e).into()),
        _ => Err(ApiError::BadResponse {
            socket: socket.display().to_string(),
            why: "neither a result nor an error".into(),
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_and_requests_parse() {
        assert_eq!(
            parse_peer("10.0.0.1").unwrap(),
            "10.0.0.1:7240".parse().unwrap()
        );
        assert_eq!(parse_peer("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert!(parse_peer("host").is_err());
        let sent = std::cell::Cell::new(None);
        let r = answer(
            br#"{"peer":"10.0.0.2","count":3,"size":100,"gap_ns":1000}"#,
            |p, s| {
                sent.set(Some((p, s.probes.len())));
                Err(Error::BadInput("no agent here".into()))
            },
        );
        assert_eq!(sent.get(), Some(("10.0.0.2:7240".parse().unwrap(), 3)));
        assert_eq!(r.error.as_deref(), Some("no agent here"));
        let never = |_, _| -> Result<TrainResult, Error> { panic!("not to be sent") };
        for bad in [
            &br#"{"peer":"10.0.0.2","count":3}"#[..],
            br#"{"peer":"10.0.0.2","count":3,"size":10,"gap_ns":1}"#,
            br#"{"peer":"x","count":3,"size":100,"gap_ns":1}"#,
            b"not json",
        ] {
            let r = answer(bad, never);
            assert!(!r.ok && r.error.is_some(), "{r:?}");
        }
    }
}

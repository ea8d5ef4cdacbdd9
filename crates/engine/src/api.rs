//! The Probe API: a local Unix-socket protocol for probers that are not built in.
//! One JSON object per line each way; see `docs/probe-api.md`.

use crate::agent::Shared;
use crate::client::Session;
use crate::train::{TrainResult, TrainSpec};
use crate::{Error, DEFAULT_PORT};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
    pub fn spec(&self) -> Result<TrainSpec, Error> {
        match (&self.train, self.count, self.size, self.gap_ns) {
            (Some(t), None, None, None) => Ok(t.clone()),
            (None, Some(n), Some(l), Some(g)) => Ok(TrainSpec::uniform(n, l, g)),
            _ => Err(Error::BadInput(
                "give either `train` or all of `count`, `size`, `gap_ns`".into(),
            )),
        }
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

/// `IP` or `IP:PORT`.
pub fn parse_peer(s: &str) -> Result<SocketAddr, Error> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
        })
        .map_err(|_| Error::BadInput(format!("bad peer {s:?}: expected IP or IP:PORT")))
}

pub(crate) fn bind(path: &Path) -> Result<UnixListener, Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(Error::BadInput(format!(
                "another agent already serves {}",
                path.display()
            )));
        }
        let _ = std::fs::remove_file(path);
    }
    let l = UnixListener::bind(path)
        .map_err(|e| Error::io(format!("bind Probe API socket {}", path.display()), e))?;
    l.set_nonblocking(true)
        .map_err(|e| Error::io("Probe API socket", e))?;
    Ok(l)
}

type Sessions = Mutex<HashMap<SocketAddr, Session>>;

pub(crate) fn serve(listener: UnixListener, s: Arc<Shared>) {
    let sessions: Arc<Sessions> = Arc::new(Mutex::new(HashMap::new()));
    let clients = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    while !s.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if clients.load(Ordering::Relaxed) >= MAX_CLIENTS {
                    continue; // dropped: the client sees the connection close
                }
                clients.fetch_add(1, Ordering::Relaxed);
                let (s2, sess, cl) = (s.clone(), sessions.clone(), clients.clone());
                handles.push(std::thread::spawn(move || {
                    serve_client(stream, &s2, &sess);
                    cl.fetch_sub(1, Ordering::Relaxed);
                }));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
        handles.retain(|h: &std::thread::JoinHandle<()>| !h.is_finished());
    }
    for h in handles {
        let _ = h.join();
    }
}

fn serve_client(stream: UnixStream, s: &Shared, sessions: &Sessions) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    while !s.stop.load(Ordering::Relaxed) {
        match (&mut reader)
            .take((MAX_REQUEST + 1 - line.len()) as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) if line.is_empty() => return,
            Ok(_) if line.ends_with(b"\n") || line.len() > MAX_REQUEST => {}
            Ok(0) => {}
            Ok(_) => continue,
            Err(e) if crate::transient(&e) => continue,
            Err(_) => return,
        }
        let resp = if line.len() > MAX_REQUEST {
            s.counters.api_errors.fetch_add(1, Ordering::Relaxed);
            let r = ApiResponse {
                ok: false,
                result: None,
                error: Some(format!("request longer than {MAX_REQUEST} bytes")),
            };
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string(&r).expect("response serializes")
            );
            return;
        } else {
            handle(&line, s, sessions)
        };
        line.clear();
        s.counters.api_requests.fetch_add(1, Ordering::Relaxed);
        if !resp.ok {
            s.counters.api_errors.fetch_add(1, Ordering::Relaxed);
        }
        if writeln!(
            out,
            "{}",
            serde_json::to_string(&resp).expect("response serializes")
        )
        .is_err()
        {
            return;
        }
    }
}

fn handle(line: &[u8], s: &Shared, sessions: &Sessions) -> ApiResponse {
    let fail = |e: String| ApiResponse {
        ok: false,
        result: None,
        error: Some(e),
    };
    let req: ApiRequest = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => return fail(format!("bad request: {e}")),
    };
    let (peer, spec) = match (parse_peer(&req.peer), req.spec()) {
        (Ok(p), Ok(t)) => (p, t),
        (Err(e), _) | (_, Err(e)) => return fail(e.to_string()),
    };
    let mut map = sessions.lock().expect("api sessions lock");
    let sess = match map.entry(peer) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            match Session::connect(peer, &s.key, s.pacer.clone(), Duration::from_secs(3)) {
                Ok(sess) => v.insert(sess),
                Err(e) => return fail(e.to_string()),
            }
        }
    };
    match sess.send_train(&spec) {
        Ok(r) => {
            if r.stats.report_missing {
                // The peer may be gone: reconnect next time.
                map.remove(&peer);
            }
            ApiResponse {
                ok: true,
                result: Some(r),
                error: None,
            }
        }
        Err(e) => {
            map.remove(&peer);
            fail(e.to_string())
        }
    }
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
    let r: ApiResponse = serde_json::from_str(&resp).map_err(|e| Error::Protocol {
        peer: socket.display().to_string(),
        why: format!("bad response: {e}"),
    })?;
    match (r.ok, r.result, r.error) {
        (true, Some(res), _) => Ok(res),
        (_, _, Some(e)) => Err(Error::BadInput(format!("agent: {e}"))),
        _ => Err(Error::Protocol {
            peer: socket.display().to_string(),
            why: "empty response".into(),
        }),
    }
}

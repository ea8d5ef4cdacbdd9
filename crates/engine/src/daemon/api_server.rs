//! The Probe API server: a thread of the daemon that answers requests on a Unix socket by
//! sending trains over sessions it keeps per peer. Requests and responses: [`crate::api`].

use super::Shared;
use crate::api::{answer, ApiResponse, MAX_CLIENTS, MAX_REQUEST};
use crate::client::Session;
use crate::Error;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
            let r = ApiResponse::error(format!("request longer than {MAX_REQUEST} bytes"));
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
    answer(line, |peer, spec| {
        let mut map = sessions.lock().unwrap_or_else(|e| e.into_inner());
        let sess = match map.entry(peer) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Session::connect(
                peer,
                &s.key,
                s.pacer.clone(),
                Duration::from_secs(3),
            )?),
        };
        let r = sess.send_train(&spec);
        // The peer may be gone: reconnect next time.
        if r.as_ref().map_or(true, |r| r.stats.report_missing) {
            map.remove(&peer);
        }
        r
    })
}

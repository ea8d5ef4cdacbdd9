//! One GET to the agent on a fresh connection, with a deadline; the answer's body is bounded.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// The agent's answers the proxy reads are small; more is refused.
const MAX_REPLY: usize = 4 << 20;

pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

pub async fn get(
    addr: SocketAddr,
    uri: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Reply, String> {
    tokio::time::timeout(timeout, get_inner(addr, uri, token))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

async fn get_inner(addr: SocketAddr, uri: &str, token: Option<&str>) -> Result<Reply, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(uri).header(hyper::header::HOST, addr.to_string());
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), MAX_REPLY)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Reply { status, body })
}

//! A replica to put behind the proxy in examples, benches and tests: `GET /obj?size=N` answers
//! N bytes, `PUT`/`POST` reads the body and answers how many bytes it got. Bodies are bounded.

use crate::server::Body;
use crate::Error;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::time::Duration;

/// Largest object served or accepted.
pub const MAX_OBJECT: usize = 64 << 20;

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    r
}

async fn handle(req: Request<Incoming>) -> Response<Body> {
    match *req.method() {
        Method::GET => {
            let size = req
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("size="))
                .map_or(Ok(0), |v| v.parse::<usize>());
            match size {
                Ok(n) if n <= MAX_OBJECT => reply(StatusCode::OK, vec![b'x'; n]),
                _ => reply(StatusCode::BAD_REQUEST, "size must be 0..=67108864"),
            }
        }
        Method::PUT | Method::POST => {
            match Limited::new(req.into_body(), MAX_OBJECT).collect().await {
                Ok(b) => reply(
                    StatusCode::OK,
                    format!("{{\"bytes\":{}}}", b.to_bytes().len()),
                ),
                Err(e) => reply(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
            }
        }
        _ => reply(StatusCode::METHOD_NOT_ALLOWED, "GET, PUT or POST"),
    }
}

/// A running replica; dropping it stops it.
pub struct Origin {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Origin {
    /// Listen on `listen` in the calling thread's network namespace.
    pub fn start(listen: SocketAddr) -> Result<Origin, Error> {
        let std_listener =
            std::net::TcpListener::bind(listen).map_err(|e| Error::Bind(listen, e))?;
        std_listener.set_nonblocking(true).map_err(Error::Io)?;
        let addr = std_listener.local_addr().map_err(Error::Io)?;
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Io)?;
        let thread = std::thread::Builder::new()
            .name("origin".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
                    loop {
                        let permit = tokio::select! {
                            _ = &mut rx => return,
                            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
                        };
                        let stream = tokio::select! {
                            _ = &mut rx => return,
                            s = listener.accept() => match s {
                                Ok((s, _)) => s,
                                Err(_) => { tokio::time::sleep(Duration::from_millis(50)).await; continue }
                            },
                        };
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .timer(TokioTimer::new())
                                .header_read_timeout(Duration::from_secs(10))
                                .serve_connection(
                                    TokioIo::new(stream),
                                    hyper::service::service_fn(|r| async move {
                                        Ok::<_, std::convert::Infallible>(handle(r).await)
                                    }),
                                )
                                .await;
                            drop(permit);
                        });
                    }
                })
            })
            .map_err(Error::Io)?;
        Ok(Origin {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

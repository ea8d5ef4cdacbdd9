//! The receiver: one TCP listener per stream (port `base + stream`), frames read whole and
//! judged by the decode rule as they arrive. One connection per stream is served at a time;
//! a bad frame header closes that connection (counted).

use crate::decode::{Decoder, StreamCounts};
use crate::wire::{Header, HEADER};
use crate::{realtime_ns, Stop};
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct ReceiverErrors {
    pub bad_frames: AtomicU64,
    pub connections: AtomicU64,
}

pub struct Receiver {
    decoder: Arc<Mutex<Decoder>>,
    errors: Arc<ReceiverErrors>,
    stop: Stop,
    threads: Vec<JoinHandle<()>>,
}

impl Receiver {
    /// Listen on `ip`, ports `base_port .. base_port + streams`; frames arriving later than
    /// `playout` after their generation do not count.
    pub fn start(
        ip: IpAddr,
        base_port: u16,
        streams: usize,
        playout: Duration,
    ) -> std::io::Result<Receiver> {
        let decoder = Arc::new(Mutex::new(Decoder::new(streams, playout.as_nanos() as u64)));
        let errors = Arc::new(ReceiverErrors::default());
        let stop = Stop::default();
        let mut threads = Vec::new();
        for s in 0..streams {
            let port = base_port
                .checked_add(s as u16)
                .ok_or_else(|| std::io::Error::other("stream ports past 65535"))?;
            let l = TcpListener::bind(SocketAddr::new(ip, port))?;
            l.set_nonblocking(true)?;
            let (d, e, st) = (decoder.clone(), errors.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("medianet-rx{s}"))
                    .spawn(move || serve(l, s, &d, &e, &st))?,
            );
        }
        Ok(Receiver {
            decoder,
            errors,
            stop,
            threads,
        })
    }

    pub fn counts(&self) -> Vec<StreamCounts> {
        self.decoder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts()
    }

    pub fn bad_frames(&self) -> u64 {
        self.errors.bad_frames.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> u64 {
        self.errors.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.set();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(l: TcpListener, stream: usize, d: &Mutex<Decoder>, e: &ReceiverErrors, stop: &Stop) {
    while !stop.is_set() {
        match l.accept() {
            Ok((c, _)) => {
                e.connections.fetch_add(1, Ordering::Relaxed);
                if let Err(why) = read_frames(c, stream, d, stop) {
                    if why.kind() == ErrorKind::InvalidData {
                        e.bad_frames.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(x) if x.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Fill `buf` unless stopped; `Ok(false)` at a clean end of stream before the first byte.
fn read_full(c: &mut TcpStream, buf: &mut [u8], stop: &Stop) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        if stop.is_set() {
            return Ok(false);
        }
        match c.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(x) if matches!(x.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(x) if x.kind() == ErrorKind::Interrupted => {}
            Err(x) => return Err(x),
        }
    }
    Ok(true)
}

fn read_frames(
    mut c: TcpStream,
    stream: usize,
    d: &Mutex<Decoder>,
    stop: &Stop,
) -> std::io::Result<()> {
    c.set_nonblocking(false)?;
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut head = [0u8; HEADER];
    let mut body = vec![0u8; crate::workload::Kind::I.size()];
    loop {
        if !read_full(&mut c, &mut head, stop)? {
            return Ok(());
        }
        let h = Header::decode(&head)
            .map_err(|why| std::io::Error::new(ErrorKind::InvalidData, why))?;
        if h.stream as usize != stream {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("stream {} on the port of stream {stream}", h.stream),
            ));
        }
        let rest = h.frame_size() - HEADER;
        if !read_full(&mut c, &mut body[..rest], stop)? {
            return Ok(());
        }
        let now = realtime_ns();
        d.lock()
            .unwrap_or_else(|e| e.into_inner())
            .handle_frame(stream, h.index, h.gen_ns, now);
    }
}

//! `mgrp-medianet`: the sender (streams, local and global schedulers, the agent's estimates
//! over its HTTP API) and the receiver (decode rule) of MediaNet-style streaming.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use mgrp_medianet::agent::{follow, keep_measuring, AgentCounts, AgentSource};
use mgrp_medianet::global::{GlobalConfig, Mode};
use mgrp_medianet::receiver::Receiver;
use mgrp_medianet::sender::{Sender, SenderConfig};
use mgrp_medianet::Stop;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "mgrp-medianet",
    about = "MediaNet-style adaptive streaming on mgrp"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    /// The original MediaNet: its own reports only, the ceiling creeps up.
    Passive,
    /// The ceiling from the local agent's estimates, the floor from its own reports.
    Mgrp,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send three streams to a receiver, levels chosen by the global scheduler.
    Send {
        /// The receiver's address.
        #[arg(long)]
        to: IpAddr,
        /// Stream i goes to port BASE_PORT + i.
        #[arg(long, default_value_t = 5004)]
        base_port: u16,
        #[arg(long, value_enum, default_value = "mgrp")]
        mode: ModeArg,
        /// The local agent's HTTP API.
        #[arg(long, default_value = "127.0.0.1:7241")]
        agent: SocketAddr,
        /// The scheduled peer whose estimates to follow (default: --to).
        #[arg(long)]
        peer: Option<String>,
        /// Follow a path by name instead (`SRC->DST`, e.g. Wren's estimates of the streams).
        #[arg(long, conflicts_with = "peer")]
        path: Option<String>,
        /// Bearer token for an agent off this host.
        #[arg(long)]
        token: Option<String>,
        /// Keep the agent measuring the peer back to back (on-demand requests), as the seed's
        /// global scheduler kept pathload running.
        #[arg(long)]
        keep_measuring: bool,
        /// Seconds to stream (0: until killed).
        #[arg(long, default_value_t = 0)]
        duration: u64,
        /// Print the final status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Receive the streams and decode them by the rule (a frame counts if it and the frame it
    /// depends on arrived in time).
    Receive {
        #[arg(long)]
        listen: IpAddr,
        #[arg(long, default_value_t = 5004)]
        base_port: u16,
        /// Playout delay: a frame arriving later than this after its generation is late.
        #[arg(long, default_value_t = 1000)]
        playout_ms: u64,
        /// Seconds to receive (0: until killed).
        #[arg(long, default_value_t = 0)]
        duration: u64,
        #[arg(long)]
        json: bool,
    },
}

fn until(duration: u64, mut every_s: impl FnMut(f64) -> Result<()>) -> Result<()> {
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let t = t0.elapsed().as_secs_f64();
        every_s(t)?;
        if duration > 0 && t >= duration as f64 {
            return Ok(());
        }
    }
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Send {
            to,
            base_port,
            mode,
            agent,
            peer,
            path,
            token,
            keep_measuring: measure,
            duration,
            json,
        } => {
            let mode = match mode {
                ModeArg::Passive => Mode::Passive,
                ModeArg::Mgrp => Mode::Mgrp,
            };
            let sender = Sender::start(SenderConfig::new(to, base_port, GlobalConfig::new(mode)))
                .with_context(|| format!("connecting to the receiver at {to}"))?;
            let stop = Stop::default();
            let counts = Arc::new(AgentCounts::default());
            if mode == Mode::Mgrp {
                let selector = match (path, peer) {
                    (Some(p), _) => format!("path={}", p.replace('>', "%3E")),
                    (None, Some(p)) => format!("peer={p}"),
                    (None, None) => format!("peer={to}"),
                };
                let src = AgentSource {
                    api: agent,
                    selector,
                    token,
                };
                if measure {
                    let (src, st, c) = (src.clone(), stop.clone(), counts.clone());
                    std::thread::spawn(move || keep_measuring(src, st, c));
                }
                let (tx, st, c) = (sender.estimates(), stop.clone(), counts.clone());
                std::thread::spawn(move || follow(src, tx, st, c));
            }
            until(duration, |t| {
                let s = sender.status();
                if let Some(e) = &s.error {
                    bail!("sender: {e}");
                }
                eprint!(
                    "\r{t:>5.0} s  levels {:?}  ceiling {:.2} Mbit/s  floor {:.2}  estimates {}   ",
                    s.levels,
                    s.ceiling_bps / 1e6,
                    s.floor_bps / 1e6,
                    s.global.estimates
                );
                Ok(())
            })?;
            stop.set();
            let mut s = sender.stop();
            s.timeline.clear();
            eprintln!();
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                for (i, c) in s.streams.iter().enumerate() {
                    println!(
                        "stream {i}: {} frames called for, {} sent, {} dropped behind, {} late, {} level changes",
                        c.intended, c.sent, c.dropped_behind, c.dropped_late, c.level_changes
                    );
                }
            }
            Ok(())
        }
        Cmd::Receive {
            listen,
            base_port,
            playout_ms,
            duration,
            json,
        } => {
            let r = Receiver::start(listen, base_port, 3, Duration::from_millis(playout_ms))
                .with_context(|| format!("listening on {listen}:{base_port}.."))?;
            let mut last = 0;
            until(duration, |t| {
                let c = r.counts();
                let decoded: u64 = c.iter().map(|s| s.decoded).sum();
                eprint!(
                    "\r{t:>5.0} s  decoded {decoded} frames ({:.1} fps now)   ",
                    (decoded - last) as f64
                );
                last = decoded;
                Ok(())
            })?;
            eprintln!();
            let c = r.counts();
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                for (i, s) in c.iter().enumerate() {
                    println!(
                        "stream {i}: {} received, {} decoded ({} bytes), {} late, {} broken",
                        s.received, s.decoded, s.decoded_bytes, s.late, s.broken
                    );
                }
            }
            Ok(())
        }
    }
}

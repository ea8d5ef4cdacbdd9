//! `mgrp-proxy`: forward each request to the replica with the most available bandwidth.
//!
//! ```sh
//! mgrp-proxy --listen 127.0.0.1:8080 --replica 198.18.2.2:8080 --replica 198.18.3.2:8080 \
//!            --agent 127.0.0.1:7241
//! curl -s http://127.0.0.1:8080/proxy/status
//! ```

use clap::Parser;
use mgrp_proxy::{Proxy, ProxyConfig, Replica};
use std::net::SocketAddr;

#[derive(Parser)]
#[command(
    about = "An HTTP proxy that sends each request to the replica whose path has the most available bandwidth, as the local mgrp agent reports it"
)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A replica's HTTP address (repeat); its path is the agent's peer of the same IP.
    #[arg(long = "replica", required = true)]
    replicas: Vec<SocketAddr>,
    /// The local agent's HTTP API.
    #[arg(long, default_value = "127.0.0.1:7241")]
    agent: SocketAddr,
    /// A file holding the agent's API token (needed off loopback).
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// One request in N goes to another replica to keep its path fresh.
    #[arg(long, default_value_t = 128)]
    divert_every: u64,
}

fn main() {
    let a = Args::parse();
    let mut cfg = ProxyConfig::new(
        a.listen,
        a.replicas.into_iter().map(Replica::new).collect(),
        a.agent,
    );
    cfg.choice.divert_every = a.divert_every;
    if let Some(f) = a.token_file {
        match std::fs::read_to_string(&f) {
            Ok(t) => cfg.token = Some(t.trim().to_string()),
            Err(e) => {
                eprintln!("mgrp-proxy: {}: {e}", f.display());
                std::process::exit(2);
            }
        }
    }
    match Proxy::start(cfg) {
        Ok(p) => {
            eprintln!("mgrp-proxy: listening on {}", p.local_addr());
            p.wait();
        }
        Err(e) => {
            eprintln!("mgrp-proxy: {e}");
            std::process::exit(1);
        }
    }
}

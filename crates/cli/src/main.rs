//! `mgrp`: the Measurement Manager's command line.

mod accuracy;
mod agent_cmd;
mod bench_cmd;
mod bottleneck_bench;
mod bottleneck_cmd;
mod capacity_bench;
mod control_cmd;
mod estimate_cmd;
mod inline_bench;
mod inline_cmd;
mod loss_bench;
mod map_bench;
mod map_cmd;
mod medianet_bench;
mod methods;
mod modes_bench;
mod mpat_bench;
mod mpat_cmd;
mod output;
mod passive_bench;
mod passive_cmd;
mod probe_cmd;
mod proxy_bench;
mod query_cmd;
mod riders_bench;
mod signals;
mod tcp_avail_bench;
mod tcp_avail_cmd;
mod testbed_cmd;
mod topo_cmd;
mod trace_cmd;
mod tracking_bench;
mod wren2_bench;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "mgrp",
    version,
    about = "mgrp — the Measurement Manager: what a network path can give you, right now"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build, inspect and tear down the network-namespace testbed; run cross traffic and read ground truth.
    #[command(subcommand)]
    Testbed(testbed_cmd::TestbedCmd),
    /// Run the per-host agent: answer probes of authenticated peers, serve the Probe API.
    Agent(agent_cmd::AgentArgs),
    /// Send probe trains to a peer agent and print dispersion, rate, loss and gap error (pktrain).
    Probe(probe_cmd::ProbeArgs),
    /// Estimate capacity and available bandwidth to a peer agent.
    Estimate(estimate_cmd::EstimateArgs),
    /// The path to a peer agent hop by hop: routers' addresses and delays (TTL-limited probes).
    Trace(trace_cmd::TraceArgs),
    /// The throughput a new TCP flow gets on the path to a peer agent now (a bounded flow).
    TcpAvailable(tcp_avail_cmd::TcpAvailArgs),
    /// Which link of the path to a peer agent limits a TCP flow, and what it gets (Tneck).
    Bottleneck(bottleneck_cmd::BottleneckArgs),
    /// Netmapper: the links of the paths to several agents, bottlenecks ("=B") and bounds (">B").
    Map(map_cmd::MapArgs),
    /// Available bandwidth from existing TCP traffic (Wren), live or from a pcap; no probes.
    Passive(passive_cmd::PassiveArgs),
    /// Run a command with its TCP sockets on a transfer mode (background, full-speed, ledbat).
    Run(control_cmd::RunArgs),
    /// The transfer modes: which are registered, what the agent feeds them; load them by hand.
    #[command(subcommand)]
    Control(control_cmd::ControlCmd),
    /// MPAT aggregates in the local agent: create, reweight, delete, status; run a command on mgrp_mpat.
    #[command(subcommand)]
    Mpat(mpat_cmd::MpatCmd),
    /// Benchmarks that print figures (JSON and a table).
    #[command(subcommand)]
    Bench(bench_cmd::BenchCmd),
    /// Inline measurement (ImTCP): this host's own TCP flows measure their path; no probes.
    Inline(inline_cmd::InlineArgs),
    /// Client-created queries in the local agent: create (once, periodic, event), list, show, delete.
    #[command(subcommand)]
    Query(query_cmd::QueryCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // The command's exit status is ours; our own failures are 125 (as `env`, `timeout`).
        Command::Run(a) => {
            return control_cmd::run(a).unwrap_or_else(|e| {
                fail(e);
                ExitCode::from(125)
            })
        }
        Command::Control(c) => control_cmd::control(c),
        Command::Mpat(c) => {
            return mpat_cmd::mpat(c).unwrap_or_else(|e| {
                fail(e);
                ExitCode::from(1)
            })
        }
        Command::Testbed(cmd) => testbed_cmd::run(cmd),
        Command::Bench(cmd) => bench_cmd::run(cmd),
        Command::Agent(a) => agent_cmd::run(a),
        Command::Probe(a) => probe_cmd::run(a),
        Command::Estimate(a) => estimate_cmd::run(a),
        Command::Passive(a) => passive_cmd::run(a),
        Command::Trace(a) => trace_cmd::run(a),
        Command::TcpAvailable(a) => tcp_avail_cmd::run(a),
        Command::Bottleneck(a) => bottleneck_cmd::run(a),
        Command::Inline(a) => inline_cmd::run(a),
        Command::Map(a) => map_cmd::run(a),
        Command::Query(c) => query_cmd::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("mgrp: error: {e:#}");
    ExitCode::FAILURE
}

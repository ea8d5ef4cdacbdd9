//! `mgrp`: the Measurement Manager's command line.

mod bench_cmd;
mod output;
mod testbed_cmd;

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
    /// Benchmarks that print figures (JSON and a table).
    #[command(subcommand)]
    Bench(bench_cmd::BenchCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Testbed(cmd) => testbed_cmd::run(cmd),
        Command::Bench(cmd) => bench_cmd::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mgrp: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

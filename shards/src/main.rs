//! `coral`: the command line. Today it runs the paper's experiments in the
//! deterministic simulator (`coral sim ...`); the node runtime, the client
//! commands and the demo join it as they are built.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod sim;

/// coral — CoralCDN rebuilt: a peer-to-peer CDN on a sloppy hash table.
#[derive(Parser, Debug)]
#[command(name = "coral", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one of the paper's experiments in the deterministic simulator.
    Sim {
        #[command(subcommand)]
        experiment: sim::Experiment,
    },
}

/// How nodes join in a simulated experiment.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapMode {
    /// Each node joins through a random node already in the network.
    Random,
    /// Every node joins through node 0, as in the paper's runs.
    WellKnown,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim { experiment } => sim::run(experiment),
    }
}

//! The `deputy` binary: parse the command line, send logs to stderr, run.

use std::process::ExitCode;

use clap::Parser;
use deputy::surfaces::cli::{Cli, Command, run};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // stdout belongs to the MCP transport (serve) or the answer (run): logs go to stderr only.
    // `serve` logs its lifecycle by default; `run` stays quiet unless RUST_LOG asks.
    let default_level = match cli.command {
        Command::Serve(_) => "deputy=info,rmcp=warn",
        Command::Run { .. } | Command::Turn { .. } | Command::Sessions(_) | Command::Schemas { .. } => "warn",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_env_filter(filter).init();
    run(cli).await
}
